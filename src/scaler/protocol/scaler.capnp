@0x998056e1aa1e2d15;
# Scaler wire protocol, version 1. This file is the source of truth; docs/protocol.md explains it.
#
# Every ZeroMQ message is: [routing id (ROUTER side only)] [header] [payload frame 0] ... [payload frame m]
#   header    one frame: a `Message` below, serialized with Cap'n Proto's standard (unpacked) encoding.
#   payloads  opaque bytes (serialized functions, arguments, results, objects, errors). The scheduler stores and
#             forwards them but never decodes them. Which payload belongs to what is told by the header.
#
# Payload frames. A batch message lists the size of each of its payloads in `payloadSizes` (u64 column) and
# carries the payloads, in order, in the frames after the header: each frame holds one or more whole payloads
# back to back (a payload never spans two frames, there is no padding). Senders put each big payload in a frame
# of its own (zero-copy) and pack runs of small ones into one frame (one frame costs far more than its bytes).
# Receivers walk the sizes: a payload of size s > 0 starts where the previous one ended, or at the start of the
# next frame when the current frame is used up; a payload of size 0 takes no bytes. Every frame must be used up
# exactly; anything else is malformed.
#
# Columns. Per-item numbers in batch messages travel as packed little-endian arrays inside `Data` fields
# ("u64 column" = n * 8 bytes, "u16 column" = n * 2 bytes, "u8 column" = n bytes), so a batch of thousands of
# tasks costs one header to build and read. A column's length must match the batch's item count exactly.
#
# Ids. Task ids and object ids are unsigned 64-bit integers in one name space. The scheduler gives every
# session an `idPrefix` in `Welcome`; the session mints ids as (idPrefix << 40) | n with 1 <= n < 2**40,
# never reusing one. Id 0 is never an id (in `argRefs` it means "inline payload"). An argument may refer to
# an unfinished task of the same session: the task then waits, and receives that task's result. The scheduler
# keeps such a result, as an object whose id is the task's id, exactly as long as an unfinished task refers
# to it.

struct Message {
  union {
    hello @0 :Hello;                  # client|worker -> scheduler, first message of a session; monitor ->
                                      # scheduler's monitor address: subscribe
    welcome @1 :Welcome;              # scheduler -> client|worker|monitor, answer to Hello
    refused @2 :Refused;              # scheduler -> client|worker|monitor, Hello not accepted; no session
    heartbeat @3 :Heartbeat;          # client|worker -> scheduler, every heartbeat interval
    heartbeatEcho @4 :HeartbeatEcho;  # scheduler -> client|worker, answer to Heartbeat
    submitTasks @5 :TaskBatch;        # client -> scheduler
    dispatchTasks @6 :TaskBatch;      # scheduler -> worker
    taskResults @7 :ResultBatch;      # worker -> scheduler, scheduler -> client
    cancelTasks @8 :IdList;           # client -> scheduler, scheduler -> worker
    putObjects @9 :ObjectBatch;       # client -> scheduler, scheduler -> worker
    freeObjects @10 :IdList;          # client -> scheduler, scheduler -> worker
    balanceRequest @11 :IdList;       # scheduler -> worker: give these queued tasks back if not started
    balanceResponse @12 :IdList;      # worker -> scheduler: the tasks given back (normally from the request)
    disconnect @13 :Disconnect;       # client|worker -> scheduler: close the session now
    shutdownRequest @14 :ShutdownRequest;  # client -> scheduler: stop the whole cluster (refused if protected)
    shutdown @15 :Shutdown;           # scheduler -> client|worker: the scheduler is stopping; end the session
    error @16 :Error;                 # scheduler -> client|worker: a message was not accepted
    status @17 :Status;               # scheduler -> each monitor that said hello on the monitor address, about
                                      # once a second
    tasksStarted @18 :IdList;         # worker -> scheduler: these tasks were handed to a processor and may have
                                      # started (see "Attempts" in docs/protocol.md)
    taskOutput @19 :TaskOutput;       # worker -> scheduler: what tasks printed, and the text of errors they raised;
                                      # scheduler -> client: the printed output of its tasks flagged streamOutput
    managerReport @20 :ManagerReport; # manager -> scheduler: what it is and which units it runs (after Welcome,
                                      # and whenever a unit ends); docs/protocol.md section 8
    scaleUnits @21 :ScaleUnits;       # scheduler -> manager: units to start and units to stop
    explainTasks @22 :IdList;         # client -> scheduler: why are these tasks of mine where they are? (at most
                                      # 1024 ids; answered with taskExplanations, in order)
    taskExplanations @23 :TaskExplanations;  # scheduler -> client: the answer to explainTasks
  }
}

enum PeerKind {
  client @0;
  worker @1;
  monitor @2;                   # says hello on the monitor address only (docs/protocol.md section 11)
  manager @3;                   # a worker manager: starts and stops units of workers (docs/protocol.md section 8)
}

struct Hello {
  protocolVersion @0 :UInt32;   # must equal the scheduler's (1); otherwise Refused
  kind @1 :PeerKind;
  name @2 :Text;                # human-readable, shown in logs and monitors
  hostname @3 :Text;
  pid @4 :UInt32;
  heartbeatIntervalMs @5 :UInt32;  # how often this peer will send Heartbeat
  queueCapacity @6 :UInt32;     # workers: most tasks the scheduler may have assigned to it at once (>= 1)
  capabilities @7 :List(Text);  # workers: what it offers, each "name" or "name=value" (docs/protocol.md section 8,
                                # "Capabilities"); the payload convention it runs is one ("payload=python",
                                # "payload=json"); clients: empty; managers: what their workers offer
  unit @8 :Text;                # workers started by a worker manager: the unit it started them in (ScaleUnits.start),
                                # else empty
}

struct Welcome {
  protocolVersion @0 :UInt32;
  idPrefix @1 :UInt32;          # see "Ids" above; 1 <= idPrefix < 2**24
  schedulerName @2 :Text;
  protected @3 :Bool;           # true: ShutdownRequest will be refused
  peerTimeoutMs @4 :UInt32;     # a session silent this long is closed by the scheduler
  maxPayloadBytes @5 :UInt64;   # the most bytes one payload (function, argument, object, result) may have; a
                                # message with a bigger one gets Error(tooLarge) (results: status failed). 0: no
                                # limit stated (a scheduler that predates this field)
  # to clients (docs/protocol.md section 6, "welcome"): the workers that may take tasks now (connected, not held
  # back) and their queueCapacity (Hello) added up. Valid only with workersStated: to workers and monitors, and
  # from a scheduler that predates these fields, all three are zero.
  workers @6 :UInt32;
  workerCapacity @7 :UInt64;
  workersStated @8 :Bool;
  journaled @9 :Bool;           # to clients: this scheduler keeps a journal (scaler_scheduler --journal) and comes
                                # back with this session after a restart: keep what you would send again (docs/protocol.md
                                # section 5, "A scheduler that restarts")
}

struct Refused {
  reason @0 :Text;
  schedulerProtocolVersion @1 :UInt32;
  keyProblem @2 :Bool;          # true: refused for the key the peer's connection authenticated with (authorized
                                # for the other role, or no longer authorized); the peer should say so, not retry
}

struct Heartbeat {
  cpuPercent @0 :Float32;       # of the sending process (worker: its agent)
  rssBytes @1 :UInt64;
  lagUs @2 :UInt64;             # last measured Heartbeat -> HeartbeatEcho round trip
  # workers only:
  queued @3 :UInt32;            # tasks waiting in the worker, not yet handed to a processor
  running @4 :UInt32;           # tasks inside processors
  processorCpuPercent @5 :Float32;
  processorRssBytes @6 :UInt64;
  processors @7 :UInt32;        # processor processes alive (more than 1 while nested tasks wait)
  blockedProcessors @8 :UInt32; # processors suspended waiting on nested tasks
  waitingTasks @9 :UInt32;      # tasks started and now waiting on nested tasks: the scheduler does not count
                                # them against the worker's queueCapacity (a recursion must not run out of room)
  # clients and workers (docs/protocol.md section 10, "Connection resets"):
  resumed @10 :Bool;            # the first heartbeat on a connection made again after the peer's closed
  sent @11 :UInt64;             # with resumed: the messages this peer sent since its hello, heartbeats excluded
}

struct HeartbeatEcho {
  sentAtUs @0 :UInt64;          # always 0: the peer measures its own round trip (the scheduler also sends
                                # echoes unasked, to probe a connection that closed: do not count those)
  resumed @1 :Bool;             # the answer to a resumed heartbeat
  sent @2 :UInt64;              # with resumed: the messages the scheduler sent that peer since its welcome (the
                                # welcome included, echoes excluded)
  # the echo of a client's (not resumed) heartbeat: the same three as in Welcome, as they are now. Other echoes
  # (to workers, resumed, unasked probes) leave workersStated false: keep the values last stated.
  workers @3 :UInt32;
  workerCapacity @4 :UInt64;
  workersStated @5 :Bool;
  recovered @6 :Bool;           # with resumed: the scheduler restarted from its journal since this session's last
                                # message; it may have lost what came last: send again every unfinished task and every
                                # object not freed (ids it holds are ignored), and do not compare `sent`
}

struct TaskBatch {
  # n tasks. One payload per argument whose argRef is 0, in task order, then argument order (see "Payload
  # frames"). Python peers encode payloads as docs/protocol.md ("Python payloads") says.
  taskIds @0 :Data;             # u64 column
  functionIds @1 :Data;         # u64 column: object id holding the task's function
  flags @2 :Data;               # u8 column: bit 0 profile the run; bit 1 silent: do not send the result to
                                #   the client (graph nodes only other nodes need); bit 2 stream output: the
                                #   worker sends what the task prints (taskOutput), the scheduler forwards it;
                                #   bit 3 shared arguments (Python peers); bit 4 report end: with bit 1, the
                                #   client is told the task ended (status, empty payload), for progress
  argCounts @3 :Data;           # u16 column: arguments of each task (positional, then keyword)
  argRefs @4 :Data;             # u64 column over all arguments: 0 = the next payload; else object/task id
  keywords @5 :List(Text);      # one per argument ("" = positional), or empty when every argument is positional
  payloadSizes @6 :Data;        # u64 column: the size of each payload (one per argument whose argRef is 0)
  # Task options (Client.options). Each is a column over the tasks, or empty when every task has the default.
  timeoutsMs @7 :Data;          # u32 column: stop the task after this long running (0 = no limit); the worker
                                #   enforces it and reports status timedOut
  retries @8 :Data;             # u8 column: run again this many times when the task fails (status error,
                                #   timedOut or overMemory); the scheduler decides (submitTasks only)
  priorities @9 :Data;          # i32 column: among one client's ready tasks, higher first (default 0)
  # Capability requirements (submitTasks only; a scheduler does not send them to workers, but a forwarded lone
  # task may still carry them). A task runs only on a worker whose capabilities include every one it requires.
  requirements @10 :List(Requirement);  # the distinct requirements of this batch's tasks, or empty: none requires any
  requirementIndex @11 :Data;   # u16 column: each task's index into requirements, or empty: every task has
                                #   requirements[0] (when requirements is not empty)
  idempotencyKeys @12 :List(Text);  # submitTasks only: one per task ("" = none), or empty when no task has one. A
                                #   keyed task's first successful result is kept under its key (and the client's
                                #   public key, with keys): a task sent later with the same key gets that result
                                #   and does not run
}

struct Requirement {
  capabilities @0 :List(Text);  # each "name" or "name=value", matched exactly against a worker's capabilities
}

struct ResultBatch {
  # n results, one payload each, in order (possibly empty).
  taskIds @0 :Data;             # u64 column
  statuses @1 :Data;            # u8 column: see TaskStatus
  durationsUs @2 :Data;         # u64 column of run times (profiling), or empty
  peakMemory @3 :Data;          # u64 column of peak memory in bytes (profiling), or empty
  payloadSizes @4 :Data;        # u64 column: the size of each result's payload
  cpuTimesUs @5 :Data;          # u64 column of CPU times (profiling), or empty
}

enum TaskStatus {
  # The value sent in ResultBatch.statuses (as a byte).
  success @0;    # frame: the serialized return value
  error @1;      # frame: the serialized exception raised by the function (or by a failed dependency)
  canceled @2;   # frame: empty
  crashed @3;    # worker -> scheduler only: the process running it died; the scheduler retries or fails it
  failed @4;     # frame: UTF-8 text saying why the system could not run it (lost too often, bad reference...)
  timedOut @5;   # frame: UTF-8 text: it ran longer than its timeout; its processor was stopped
  overMemory @6; # frame: UTF-8 text: its processor went over the worker's memory limit and was stopped
}

struct ObjectBatch {
  # n objects, one payload each, in order.
  objectIds @0 :Data;           # u64 column
  names @1 :List(Text);         # one per object, or empty
  payloadSizes @2 :Data;        # u64 column: the size of each object's payload
}

struct IdList {
  ids @0 :Data;                 # u64 column
}

struct Disconnect {
  reason @0 :Text;
}

struct ShutdownRequest {
  reason @0 :Text;
}

struct Shutdown {
  reason @0 :Text;
  workersStay @1 :Bool;         # to workers: true when only the scheduler stops (a signal): keep running and say hello
                                # until a scheduler answers at the same address (a restart); false when the cluster
                                # ends (a client's shutdownRequest; a scheduler older than this field): stop.
                                # To a client of a journaled scheduler: true when it comes back with the session
}

enum ErrorCode {
  malformed @0;         # could not be decoded, or a column had the wrong length
  notConnected @1;      # the sender has no session (no Hello, or its session was closed); say Hello again
  badRequest @2;        # well formed but not allowed (a kind this peer may not send, wrong id prefix, id in use)
  protected @3;         # ShutdownRequest refused: the scheduler runs in protected mode
  tooLarge @4;          # over a configured limit
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
  ids @2 :Data;         # u64 column: the task/object ids concerned, if any
}

struct Status {
  # Published on the monitor socket. Counters are totals since the scheduler started.
  schedulerName @0 :Text;
  timeUs @1 :UInt64;
  cpuPercent @2 :Float32;
  rssBytes @3 :UInt64;
  tasksByState @4 :List(Counter);
  sent @5 :List(Counter);       # messages sent, by Message member name
  received @6 :List(Counter);   # messages received, by Message member name
  workers @7 :List(WorkerStatus);
  clients @8 :List(ClientStatus);
  protected @9 :Bool;
  droppedMessages @10 :UInt64;  # messages answered with malformed, notConnected or badRequest
  refusedPeers @11 :UInt64;     # connections and messages refused for their key: not authorized (the handshake
                                # failed), authorized for the other role, or removed from the authorized keys
  handlerErrors @12 :UInt64;    # exceptions the scheduler survived while handling events (each is logged with its
                                # traceback): 0 unless there is a bug
  clockUs @13 :UInt64;          # the scheduler's own (monotonic) clock now: the clock of the times below
  functions @14 :List(FunctionStatus);  # the functions with tasks in flight or most recently submitted (bounded)
  events @15 :TaskEvents;       # empty unless a monitor subscribes
  failures @16 :List(TaskFailure);      # since the previous status, at most 100
  outputs @17 :List(OutputRecord);      # since the previous status, at most 256 KiB of text
  departed @18 :List(DepartedWorker);   # since the previous status
  withheld @19 :Text;           # "" when failures and outputs carry everything they recorded; otherwise why this
                                # monitor gets none of them (task data reaches only the monitors the operator allows:
                                # scaler_scheduler --monitor-task-data)
  managers @20 :List(ManagerStatus);    # the worker managers connected (docs/protocol.md section 8)
  waiting @21 :List(WaitingTasks);      # queued tasks no worker holds, by what they require, with why (at most 16)
  unitsStarted @22 :UInt64;     # units the scheduler asked managers to start (scaleUnits.start), since it started
  unitsStopped @23 :UInt64;     # units it asked them to stop (drained, or given up)
  unitsFailed @24 :UInt64;      # units that failed to start: ended before a worker of them connected, or did not
                                # connect within the manager's startTimeoutMs
  startedUs @25 :UInt64;        # when this scheduler process started (wall clock, µs since the epoch)
  recovered @26 :Text;          # "" unless it started from its journal (--journal) with something in it: then what
                                # it restored, e.g. "2 client sessions, 2,400 tasks, 0 held results"
}

struct ManagerStatus {
  # A worker manager as the scheduler's scaling policy sees it.
  name @0 :Text;
  tier @1 :UInt32;
  capabilities @2 :List(Text);  # what its workers offer (as in its Hello)
  minUnits @3 :UInt32;
  maxUnits @4 :UInt32;
  connected @5 :UInt32;         # units with a worker connected, not draining
  draining @6 :UInt32;          # units being drained before they are stopped
  pending @7 :UInt32;           # units asked for whose workers have not connected yet
  oldestPendingMs @8 :UInt64;   # since the oldest pending unit was asked for (0: none pending)
  failures @9 :UInt32;          # units in a row that failed to start (0: the last one started)
  lastFailure @10 :Text;        # "<unit>: why" of the last unit that failed to start
  retryInMs @11 :UInt64;        # no unit is asked of it before this much longer (back-off after a failure)
}

struct WaitingTasks {
  # Queued tasks that require the same capabilities and that no worker holds, and why they wait.
  capabilities @0 :List(Text);  # what they require ([] : nothing beyond the payload convention)
  tasks @1 :UInt64;
  reason @2 :Text;              # e.g. "no connected worker offers gpu; worker manager slurm-gpu requested 2 units 12s
                                # ago, 0 connected"
}

struct TaskExplanations {
  # The answer to explainTasks: one text per id asked, in order. A task that is not the asking client's, or that
  # the scheduler no longer has, is "not in the scheduler".
  taskIds @0 :Data;             # u64 column
  texts @1 :List(Text);
}

struct TaskOutput {
  # n pieces of text, in the order they were written. Worker -> scheduler: stream 1 (stdout) and 2 (stderr) only
  # for tasks flagged streamOutput; stream 3 for any task that ended with status error, sent before its result:
  # the exception and its traceback as text, for monitors (the client reads the result's payload). The scheduler
  # forwards streams 1 and 2 to the task's client and keeps recent pieces of every stream for monitors.
  taskIds @0 :Data;             # u64 column
  streams @1 :Data;             # u8 column: 1 stdout, 2 stderr, 3 error text
  texts @2 :List(Text);         # one per entry; a worker sends at most 64 KiB per piece
}

struct FunctionStatus {
  # One function's tasks since the scheduler started, by the name its client gave the function's object.
  name @0 :Text;
  submitted @1 :UInt64;
  running @2 :UInt32;           # assigned to a worker now (queued there or running)
  success @3 :UInt64;
  error @4 :UInt64;
  canceled @5 :UInt64;
  failed @6 :UInt64;            # failed, timed out or over memory
  durationUs @7 :UInt64;        # total run time of its tasks that ended with a result and a run time (profiled)
  timedTasks @8 :UInt64;        # how many tasks durationUs sums (the mean is durationUs / timedTasks)
  durationBuckets @9 :Data;     # those tasks by run time: u64 little-endian counts, one per upper bound of
                                # records.DURATION_BOUNDS_US (1 ms, 5 ms, ... 300 s) and a last one for longer ones
}

struct TaskEvents {
  # Tasks that started or ended since the previous status, as columns (one entry per event), recorded only while a
  # monitor subscribes. When there are too many to draw, only tasks whose id counter (low 40 bits) is a multiple
  # of sampleEvery are recorded, both their start and their end.
  taskIds @0 :Data;             # u64 column
  kinds @1 :Data;               # u8 column: 0 started (its worker said so: tasksStarted), 1 ended
  statuses @2 :Data;            # u8 column: TaskStatus of an ended task, 0 for a start
  functions @3 :Data;           # u32 column: index into names
  workers @4 :Data;             # u32 column: index into names; 0xFFFFFFFF: no worker (ended while not assigned)
  timesUs @5 :Data;             # u64 column: when the scheduler saw it, on Status.clockUs's clock
  durationsUs @6 :Data;         # u64 column: run time the worker measured (ended tasks with a result), else 0
  peakMemory @7 :Data;          # u64 column: peak memory in bytes the worker measured (profiled tasks), else 0
  names @8 :List(Text);         # the function and worker names the u32 columns index
  sampleEvery @9 :UInt32;       # 1: every event; k: one task in k (see above)
  dropped @10 :UInt64;          # events not recorded since the previous status (sampling and bounds)
}

struct TaskFailure {
  # A task that ended with status error, failed, timed out or over memory (recorded while a monitor subscribes).
  taskId @0 :UInt64;
  function @1 :Text;
  worker @2 :Text;              # "" if it ended while not assigned
  status @3 :UInt8;             # TaskStatus
  text @4 :Text;                # the error's text and traceback (taskOutput stream 3) or the reason; truncated
  timeUs @5 :UInt64;            # on Status.clockUs's clock
}

struct OutputRecord {
  # A piece of a task's output (taskOutput), recorded while a monitor subscribes; bounded per status.
  taskId @0 :UInt64;
  function @1 :Text;
  worker @2 :Text;
  stream @3 :UInt8;             # 1 stdout, 2 stderr
  text @4 :Text;
  timeUs @5 :UInt64;
}

struct DepartedWorker {
  # A worker whose session ended since the previous status.
  name @0 :Text;
  reason @1 :Text;
  lost @2 :Bool;                # true: it did not say goodbye (timed out, connection lost, crashed)
  timeUs @3 :UInt64;            # on Status.clockUs's clock
}

struct Counter {
  name @0 :Text;
  value @1 :UInt64;
}

struct WorkerStatus {
  name @0 :Text;
  agentCpuPercent @1 :Float32;
  agentRssBytes @2 :UInt64;
  cpuPercent @3 :Float32;
  rssBytes @4 :UInt64;
  free @5 :UInt32;              # capacity plus waiting tasks, minus assigned
  sent @6 :UInt32;              # tasks assigned by the scheduler and not finished, when its last heartbeat came
  queued @7 :UInt32;            # tasks the worker reports waiting in its queue
  lagUs @8 :UInt64;
  processors @9 :UInt32;
  blockedProcessors @10 :UInt32;
  running @11 :UInt32;
  completed @12 :UInt64;
  waiting @13 :UInt32;          # its tasks waiting on nested tasks (heartbeat.waitingTasks)
  heldBackMs @14 :UInt32;       # it was lost repeatedly: no new tasks for this much longer (0: not held back)
  heartbeatAgeMs @15 :UInt32;   # since its last heartbeat: queued, running, the CPU and memory figures and sent
                                # are all as of that heartbeat (sent: the scheduler's count when it arrived)
  capabilities @16 :List(Text); # as in its Hello
}

struct ClientStatus {
  name @0 :Text;
  tasks @1 :UInt32;             # unfinished tasks
  objects @2 :UInt32;
  completed @3 :UInt64;
  assigned @4 :UInt32;          # of its unfinished tasks, those at workers (prefetched or running); the others are
                                # queued (waiting on their arguments or queued at the scheduler). 0 from old schedulers
}

struct ManagerReport {
  # A worker manager's state, sent after Welcome and again whenever it changes (a unit ended). The scheduler decides
  # how many units it runs (scaleUnits); the manager only starts and stops them. A unit brings workersPerUnit
  # workers, each saying the unit's name in its Hello.
  minUnits @0 :UInt32;
  maxUnits @1 :UInt32;          # >= 1, >= minUnits
  workersPerUnit @2 :UInt32;    # >= 1
  slotsPerWorker @3 :UInt32;    # tasks one of its workers runs at once, >= 1
  tier @4 :UInt32;              # lower tiers are filled first and retired last
  idleMs @5 :UInt64;            # a unit whose workers held no task this long is drained, then stopped
  startTimeoutMs @6 :UInt64;    # a unit not connected this long after scaleUnits asked for it is given up
  units @7 :List(Text);         # the units it runs now (started and not ended)
  ended @8 :List(Text);         # units that ended since its last report (exited, failed, cancelled)
  reason @9 :Text;              # why they ended, for the log
}

struct ScaleUnits {
  # What the scheduler's scaling policy decided for this manager. Start: unit names the scheduler chose (start each
  # once, its workers say the name in Hello.unit). Stop: units whose workers hold no task (drained first).
  start @0 :List(Text);
  stop @1 :List(Text);
  reason @2 :Text;              # why, for the manager's log
}
