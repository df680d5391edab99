// scaler_ui's dashboard. It polls scaler_ui's JSON (/api/...) about once a second: the summary always, and what the
// view on screen needs, incrementally where it matters (since=the number the previous answer ended at). Charts are
// Apache ECharts, served by scaler_ui itself (static/echarts.min.js): nothing is fetched from anywhere else.
"use strict";

const REFRESH_MS = 1000;
const KEEP_MS = 30 * 60 * 1000; // series and task-stream bars kept in the page
const STALE_SECONDS = 5; // the banner warns past this age of the latest status
const BARS_KEEP = 60000; // ended bars kept in the page (the newest)
const BARS_DRAWN = 10000; // bars drawn at once, running ones first, then the newest ended ones
const STREAM_ROWS = 48; // processor rows visible at once in the task stream (scroll for more)
const FAILURES_KEEP = 1000;
const FAILURES_SHOWN = 200;
const OUTPUTS_KEEP = 2000;
const OUTPUT_TASKS_SHOWN = 200;
const PALETTE = ["#4e79a7", "#59a14f", "#edc948", "#b07aa1", "#f28e2b", "#76b7b2", "#9c755f", "#86bcb6",
                 "#8cd17d", "#499894", "#b6992d", "#a0cbe8", "#ffbe7d", "#6a51a3", "#2ca02c", "#17becf"];
const BAD = "#d6404b";
const CANCELED = "#a8adb3";
const LOST = "#f3a5aa";
const OK_STATUSES = new Set(["success", "running"]);

// ------------------------------------------------------------------------------------------------ small helpers
const $ = id => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}
const num = n => (n == null ? "" : Number(n).toLocaleString("en-US"));
function bytes(n) {
  if (n == null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : String(Math.round(n))) + " " + units[i];
}
function duration(us) {
  if (us == null) return "";
  if (us < 1000) return (us / 1000).toFixed(2) + " ms";
  if (us < 1e6) return (us / 1000).toFixed(0) + " ms";
  if (us < 60e6) return (us / 1e6).toFixed(1) + " s";
  return us < 3600e6 ? (us / 60e6).toFixed(1) + " min" : (us / 3600e6).toFixed(1) + " h";
}
// A task's run time: as its worker measured it (profiling), else from its start to its end as the scheduler saw them.
const runTime = t => (t.duration_us ? duration(t.duration_us) : t.end && t.start ? duration((t.end - t.start) * 1000) : "");
const clock = ms => (ms ? new Date(ms).toLocaleTimeString("en-GB") : "");
const percent = v => (v == null ? "" : v.toFixed(1) + "%");
const colors = new Map(); // function name -> colour, in the order the page first saw them
function colorOf(name) {
  if (!colors.has(name)) colors.set(name, PALETTE[colors.size % PALETTE.length]);
  return colors.get(name);
}
function naturalCompare(a, b) { return a.localeCompare(b, "en", {numeric: true}); }
function statusClass(status) {
  return OK_STATUSES.has(status) ? "" : status === "canceled" ? "status-canceled" : "status-bad";
}

async function getJSON(path) {
  const response = await fetch(path, {cache: "no-store"});
  if (!response.ok) throw new Error(response.status + " " + (await response.text()).trim());
  return response.json();
}

function banner(text, warn) {
  const node = $("banner");
  node.textContent = text;
  node.className = warn ? "warn" : "";
}

function pairs(id, rows, kind) {
  $(id).tBodies[0].replaceChildren(...rows.map(([k, v]) =>
    el("tr", {["data-" + kind]: k}, el("td", {text: k}), el("td", {text: v}))));
}

function progressBar(parts, total) {
  const bar = el("div", {class: "progress", title: parts.map(([cls, n]) => cls + " " + num(n)).join(", ")});
  for (const [cls, n] of parts) {
    if (n > 0 && total > 0) bar.append(el("span", {class: cls, style: "width:" + (100 * n / total).toFixed(2) + "%"}));
  }
  return bar;
}

const TIME_AXIS = {type: "time", axisLabel: {hideOverlap: true, formatter: "{HH}:{mm}:{ss}"}};
function compactBytes(n) { // an axis label: 1.5 GiB, 858 MiB
  const text = bytes(n);
  return text.replace(/^(\d+)\.\d+ /, (all, whole) => (whole.length > 1 ? whole + " " : all.replace(/(\.\d)\d /, "$1 ")));
}

function baseChart(id, extra) {
  const chart = echarts.init($(id), null, {renderer: "canvas"});
  chart.setOption(Object.assign({
    animation: false,
    grid: {left: 64, right: 16, top: 30, bottom: 24},
    tooltip: {trigger: "axis"},
    legend: {top: 0, textStyle: {fontSize: 11}},
    xAxis: TIME_AXIS,
    yAxis: {type: "value", min: 0},
    series: [],
  }, extra || {}));
  return chart;
}

// ------------------------------------------------------------------------------------------------ overview
const SERIES = {
  throughput: [["success/s", "success_rate", "#3a9b4f"], ["error or failed/s", "failed_rate", BAD], ["canceled/s", "canceled_rate", CANCELED]],
  states: [["queued", "queued", "#4e79a7"], ["waiting", "waiting", "#b07aa1"], ["assigned", "assigned", "#76b7b2"],
           ["running", "running", "#59a14f"], ["canceling", "canceling", "#f28e2b"]],
  cpu: [["processors", "processors_cpu", "#4e79a7"], ["agents", "agents_cpu", "#76b7b2"], ["scheduler", "scheduler_cpu", "#f28e2b"]],
  memory: [["processors", "processors_rss", "#4e79a7"], ["agents", "agents_rss", "#76b7b2"], ["scheduler", "scheduler_rss", "#f28e2b"]],
};

const overview = {
  seq: 0,
  cols: {},
  charts: null,
  init() {
    const axis = (label, tip) => ({yAxis: {type: "value", min: 0, axisLabel: {formatter: label}},
                                   tooltip: {trigger: "axis", valueFormatter: tip}});
    const cores = v => (v == null ? "" : (v / 100).toFixed(v < 1000 ? 2 : 1) + " cores");
    this.charts = {
      throughput: baseChart("chart-throughput", axis(v => num(v), v => (v == null ? "no data" : v.toFixed(1) + "/s"))),
      states: baseChart("chart-states", axis(v => num(v), v => num(v))),
      cpu: baseChart("chart-cpu", axis(v => num(v / 100), cores)),
      memory: baseChart("chart-memory", axis(compactBytes, v => bytes(v))),
    };
  },
  reset() { this.seq = 0; this.cols = {}; },
  async fetch() {
    const data = await getJSON("/api/series?since=" + this.seq);
    if (data.epoch !== ui.epoch) return;
    for (const [key, values] of Object.entries(data)) {
      if (!Array.isArray(values)) continue;
      (this.cols[key] = this.cols[key] || []).push(...values);
    }
    this.seq = data.seq;
    const t = this.cols.t || [];
    const cut = t.findIndex(x => x >= (t[t.length - 1] || 0) - KEEP_MS);
    if (cut > 0) for (const key of Object.keys(this.cols)) this.cols[key].splice(0, cut);
  },
  async refresh(summary) {
    await this.fetch();
    this.draw();
    if (summary.status) for (const f of [...summary.status.functions].sort((a, b) => naturalCompare(a.name, b.name))) colorOf(f.name);
    this.tables(summary.status);
  },
  draw() {
    const t = this.cols.t || [];
    for (const [name, lines] of Object.entries(SERIES)) {
      const stack = name === "cpu" || name === "memory";
      this.charts[name].setOption({series: lines.map(([label, key, color]) => ({
        name: label, type: "line", showSymbol: false, color, stack: stack ? name : undefined,
        areaStyle: stack || key === "success_rate" ? {opacity: 0.25} : undefined, lineStyle: {width: 1.5},
        data: (this.cols[key] || []).map((v, i) => [t[i], v]),
      }))});
    }
  },
  tables(s) {
    if (!s) return;
    const body = $("functions").tBodies[0];
    body.replaceChildren(...s.functions.map(f => {
      const bad = f.error + f.failed;
      const bar = progressBar([["success", f.success], ["failed", bad], ["canceled", f.canceled],
                               ["assigned", f.assigned]], Math.max(f.submitted, f.success + bad + f.canceled + f.assigned));
      const mean = f.mean_us == null ? "-" : duration(f.mean_us) + (f.timed < f.success + f.error ? " *" : "");
      return el("tr", {"data-function": f.name},
        el("td", {class: "name", text: f.name, title: f.name}), el("td", {class: "bar-col"}, bar),
        el("td", {text: num(f.submitted)}), el("td", {text: num(f.queued)}), el("td", {text: num(f.assigned)}),
        el("td", {text: num(f.success)}), el("td", {class: f.error ? "status-bad" : "", text: num(f.error)}),
        el("td", {class: f.failed ? "status-bad" : "", text: num(f.failed)}),
        el("td", {text: num(f.canceled)}),
        el("td", {text: mean, title: f.mean_us == null ? "no run time came (profiling is off)" :
                  "mean of the " + num(f.timed) + " tasks that were profiled, of " + num(f.success + f.error)}));
    }));
    if (!s.functions.length) {
      body.append(el("tr", {}, el("td", {colspan: 10, class: "muted", text: "no function has tasks yet"})));
    }
    pairs("scheduler", [
      ["cpu", percent(s.cpu_percent)], ["memory", bytes(s.rss_bytes)], ["protected", s.protected ? "yes" : "no"],
      ["workers", num(s.workers)], ["processors", num(s.processors)],
      ["dropped messages", num(s.dropped_messages)], ["refused peers", num(s.refused_peers)],
      ["handler errors", num(s.handler_errors)],
      ["task events", s.sample_every > 1 ? "1 task in " + num(s.sample_every) : "every task"],
      ["task events not sent", num(s.dropped_events)],
      ["task ends not seen", num(s.ends_not_seen)],
    ], "field");
    pairs("tasks", Object.entries(s.tasks_by_state).map(([k, v]) => [k, num(v)]), "state");
    const bySize = o => Object.entries(o).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, num(v)]);
    pairs("sent", bySize(s.sent), "message");
    pairs("received", bySize(s.received), "message");
  },
  resize() { for (const chart of Object.values(this.charts)) chart.resize(); },
  latest(key) { const v = this.cols[key] || []; return v.length ? v[v.length - 1] : null; },
};

// ------------------------------------------------------------------------------------------------ task stream
// The words of docs/monitoring.md ("Words"); a failed task's cause is in CAUSE_OF.
const STATUS_OF = {0: "success", 1: "error", 2: "canceled", 3: "failed", 4: "failed", 5: "failed",
                   6: "failed", "-1": "running", "-2": "lost"};
const CAUSE_OF = {3: "crashed", 5: "timed out", 6: "over memory"};

const stream = {
  seq: 0,
  bars: [],
  running: [],
  now: 0,
  skipped: 0,
  chart: null,
  drawn: [],
  init() {
    this.chart = echarts.init($("chart-stream"), null, {renderer: "canvas"});
    this.chart.setOption({
      animation: false,
      grid: {left: 150, right: 40, top: 10, bottom: 40},
      tooltip: {trigger: "item", formatter: p => this.tooltip(p)},
      xAxis: TIME_AXIS,
      yAxis: {type: "category", inverse: true, data: [], axisTick: {show: false},
              axisLabel: {interval: 0, fontSize: 10, formatter: key => this.labels.get(key) || ""}},
      dataZoom: [
        {type: "slider", yAxisIndex: 0, right: 8, width: 14, startValue: 0, endValue: STREAM_ROWS - 1,
         maxValueSpan: STREAM_ROWS, filterMode: "weakFilter", showDetail: false},
        {type: "inside", yAxisIndex: 0, zoomOnMouseWheel: false, moveOnMouseWheel: true, filterMode: "weakFilter"},
      ],
      // progressive: 0 draws every bar at once (in chunks, a redraw every second would never reach the newest)
      series: [{type: "custom", renderItem: (params, api) => this.renderBar(params, api), encode: {x: [1, 2], y: 0},
                progressive: 0, data: []}],
    });
    this.labels = new Map();
    $("stream-window").addEventListener("change", () => this.draw());
    $("stream-pause").addEventListener("change", () => refreshSoon());
    this.chart.on("click", p => { const b = this.drawn[p.value[3]]; if (b) this.open(b.task); });
    $("task-search").addEventListener("submit", event => {
      event.preventDefault();
      const id = $("task-search-id").value.trim();
      if (id) this.open(id);
    });
    $("stream-task-close").addEventListener("click", () => { $("stream-task").hidden = true; });
  },
  async open(task) {
    const panel = $("stream-task");
    panel.hidden = false;
    panel.dataset.task = task;
    $("stream-task-id").textContent = task;
    const body = $("stream-task-body");
    body.replaceChildren(el("span", {class: "muted", text: "loading…"}));
    let parts;
    try { parts = await taskDetail(task); } catch (e) { parts = [el("p", {class: "muted", text: e.message})]; }
    if (panel.dataset.task === task) body.replaceChildren(...parts);
  },
  reset() { this.seq = 0; this.bars = []; this.running = []; },
  decode(data, from, count) {
    const out = [];
    for (let i = from; i < from + count; i++) {
      out.push({task: data.task[i], fn: data.names[data.function[i]], worker: data.names[data.worker[i]],
                lane: data.lane[i], start: data.start[i], end: data.end[i], status: STATUS_OF[data.status[i]],
                cause: CAUSE_OF[data.status[i]] || "",
                dur: data.duration_us[i], mem: data.peak_memory[i]});
    }
    return out;
  },
  async refresh(summary) {
    this.summary = summary && summary.status;
    if ($("stream-pause").checked) return;
    const data = await getJSON(`/api/stream?since=${this.seq}&window=${KEEP_MS}&limit=20000&running=${BARS_DRAWN}`);
    if (data.epoch !== ui.epoch) return;
    const ended = data.task.length - data.running;
    this.bars.push(...this.decode(data, 0, ended));
    this.running = this.decode(data, ended, data.running);
    this.seq = data.seq;
    this.now = data.now;
    this.sample = data.sample_every;
    this.skipped += data.skipped;
    const oldest = this.now - KEEP_MS;
    let cut = 0;
    while (cut < this.bars.length && this.bars[cut].end < oldest) cut++;
    cut = Math.max(cut, this.bars.length - BARS_KEEP);
    if (cut > 0) this.bars.splice(0, cut);
    this.draw();
  },
  color(bar) {
    if (bar.status === "running" || bar.status === "success") return colorOf(bar.fn);
    if (bar.status === "canceled") return CANCELED;
    return bar.status === "lost" ? LOST : BAD;
  },
  draw() {
    const windowMs = Number($("stream-window").value);
    const from = this.now - windowMs;
    const inWindow = this.bars.filter(b => b.end >= from);
    // Too many to draw: one task in k over the whole window, chosen by task id so that redraws keep the same ones.
    const room = Math.max(1, BARS_DRAWN - this.running.length);
    const thin = Math.ceil(inWindow.length / room);
    const ended = thin > 1 ? inWindow.filter(b => parseInt(b.task.slice(-8), 16) % thin === 0) : inWindow;
    const drawn = this.running.concat(ended);
    const keys = new Map();
    for (const b of drawn) keys.set(b.worker + "\u0000" + String(b.lane).padStart(4, "0"), b.worker);
    const rows = [...keys.keys()].sort(naturalCompare);
    const rowOf = new Map(rows.map((k, i) => [k, i]));
    this.labels = new Map();
    let previous = null;
    for (const key of rows) {
      const worker = keys.get(key);
      this.labels.set(key, worker === previous ? "" : worker.length > 24 ? "…" + worker.slice(-23) : worker);
      previous = worker;
    }
    this.drawn = drawn;
    const data = drawn.map((b, i) => [rowOf.get(b.worker + "\u0000" + String(b.lane).padStart(4, "0")),
                                      Math.max(b.start, from), b.end, i]);
    this.chart.setOption({xAxis: {min: from, max: this.now}, yAxis: {data: rows}, series: [{data}]});
    const fns = [...new Set(drawn.map(b => b.fn))].sort(naturalCompare);
    $("stream-legend").replaceChildren(...fns.map(fn => el("span", {"data-function": fn},
      el("span", {class: "swatch", style: "background:" + colorOf(fn)}), fn)),
      el("span", {}, el("span", {class: "swatch", style: "background:" + BAD}), "error or failed"),
      el("span", {}, el("span", {class: "swatch", style: "background:" + LOST}), "lost (its worker was lost)"));
    const notes = [num(inWindow.length) + " ended and " + num(this.running.length) + " running in the window",
                   num(rows.length) + " processor rows"];
    if (thin > 1) notes.push("drawing 1 ended task in " + num(thin));
    if (this.skipped) notes.push(num(this.skipped) + " older ones not loaded");
    if (this.sample > 1) notes.push("1 task in " + num(this.sample) + " recorded");
    $("stream-note").textContent = notes.join(" · ");
    const s = this.summary || {};
    $("stream-dropped").hidden = !s.dropped_events;
    $("stream-dropped").textContent = !s.dropped_events ? "" :
      "The scheduler did not send " + num(s.dropped_events) + " task events (more than it sends in a second): " +
      "the bars are a sample. Running tasks follow the scheduler's counts" +
      (s.ends_not_seen ? "; " + num(s.ends_not_seen) + " bars stopped when they said the task had ended." : ".");
    $("chart-stream").dataset.bars = String(drawn.length);
    $("chart-stream").dataset.functions = fns.join(",");
  },
  renderBar(params, api) {
    const bar = this.drawn[api.value(3)];
    if (!bar) return null;
    const y = api.value(0);
    const start = api.coord([api.value(1), y]);
    const end = api.coord([api.value(2), y]);
    const height = Math.max(2, api.size([0, 1])[1] * 0.72);
    const box = params.coordSys;
    const shape = echarts.graphic.clipRectByRect(
      {x: start[0], y: start[1] - height / 2, width: Math.max(1.5, end[0] - start[0]), height},
      {x: box.x, y: box.y, width: box.width, height: box.height});
    if (!shape) return null;
    const running = bar.status === "running";
    return {type: "rect", shape, style: {fill: this.color(bar), opacity: running ? 0.55 : 0.92,
            stroke: bar.status !== "success" && !running ? "#8b1d26" : null, lineWidth: 0.5}};
  },
  tooltip(p) {
    const b = this.drawn[p.value[3]];
    if (!b) return "";
    const lines = [["function", b.fn], ["task", b.task], ["worker", b.worker + " (lane " + b.lane + ")"],
                   ["status", b.status + (b.cause ? " (" + b.cause + ")" : "")], ["started", clock(b.start)]];
    if (b.status === "running") lines.push(["running for", duration((this.now - b.start) * 1000)]);
    else lines.push(["ended", clock(b.end)], ["duration", duration(b.dur || (b.end - b.start) * 1000)]);
    if (b.mem) lines.push(["peak memory", bytes(b.mem)]);
    const esc = s => String(s).replace(/[&<>]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;"})[c]);
    return lines.map(([k, v]) => `<span style="color:#888">${k}</span> ${esc(v)}`).join("<br>");
  },
  resize() { this.chart.resize(); },
};

// ------------------------------------------------------------------------------------------------ workers
const WORKER_COLUMNS = [
  ["name", "worker", r => r.name],
  ["state", "state", null],
  ["cpu", "cpu", r => percent(r.cpu), "spark_cpu"],
  ["rss", "memory", r => bytes(r.rss), "spark_rss"],
  ["prefetched", "prefetched", r => num(r.prefetched)],
  ["running", "running", r => num(r.running)],
  ["processors", "processors", r => num(r.processors)],
  ["free", "free", r => num(r.free)],
  ["lag_ms", "lag", r => r.lag_ms.toFixed(1) + " ms"],
  ["completed", "completed", r => num(r.completed)],
  ["held_back_ms", "held back", r => (r.held_back_ms ? (r.held_back_ms / 1000).toFixed(0) + " s" : "")],
  ["heartbeat_age_ms", "heartbeat", r => (r.heartbeat_age_ms / 1000).toFixed(1) + " s ago"],
  ["capabilities", "capabilities", r => r.offers.join(", ")],  // beyond payload=python, as scaler_top's caps
];

const workers = {
  sort: "name",
  order: "asc",
  offset: 0,
  limit: 50,
  filter: "",
  selected: null,
  slots: [],
  init() {
    const head = $("workers").tHead.rows[0];
    for (const [key, title] of WORKER_COLUMNS) {
      head.append(el("th", {"data-key": key, text: title, onclick: () => this.sortBy(key)}));
    }
    $("workers-limit").addEventListener("change", e => { this.limit = Number(e.target.value); this.offset = 0; refreshSoon(); });
    $("workers-prev").addEventListener("click", () => { this.offset = Math.max(0, this.offset - this.limit); refreshSoon(); });
    $("workers-next").addEventListener("click", () => { this.offset += this.limit; refreshSoon(); });
    let typing = null;
    $("workers-filter").addEventListener("input", e => {
      clearTimeout(typing);
      typing = setTimeout(() => { this.filter = e.target.value; this.offset = 0; refreshSoon(); }, 250);
    });
    $("worker-close").addEventListener("click", () => { this.selected = null; $("worker-detail").hidden = true; this.mark(); });
    this.usage = echarts.init($("chart-worker-usage"));
    this.queue = echarts.init($("chart-worker-queue"));
  },
  reset() { this.offset = 0; },
  sortBy(key) {
    if (this.sort === key) this.order = this.order === "asc" ? "desc" : "asc";
    else { this.sort = key; this.order = key === "name" || key === "state" ? "asc" : "desc"; }
    this.offset = 0;
    refreshSoon();
  },
  async refresh(summary) {
    const q = new URLSearchParams({sort: this.sort, order: this.order, offset: this.offset, limit: this.limit, q: this.filter});
    const data = await getJSON("/api/workers?" + q);
    if (data.epoch !== ui.epoch) return;
    if (data.offset >= data.total && data.total > 0) { this.offset = Math.max(0, data.total - this.limit); return; }
    this.render(data);
    const states = (summary.status && summary.status.worker_states) || {};
    $("workers-states").textContent = Object.entries(states).sort().map(([k, v]) => k + " " + num(v)).join(" · ");
    if (this.selected) await this.detail();
  },
  render(data) {
    const body = $("workers").tBodies[0];
    while (this.slots.length < data.rows.length) this.slots.push(this.makeSlot());
    const rows = this.slots.slice(0, data.rows.length);
    rows.forEach((slot, i) => this.fill(slot, data.rows[i]));
    if (body.children.length !== rows.length || rows.some((s, i) => body.children[i] !== s.tr)) {
      body.replaceChildren(...rows.map(s => s.tr));
    }
    const end = Math.min(data.total, data.offset + data.rows.length);
    $("workers-range").textContent = data.total ? `${num(data.offset + 1)}–${num(end)} of ${num(data.total)}` : "no workers";
    $("workers-prev").disabled = data.offset === 0;
    $("workers-next").disabled = end >= data.total;
    for (const th of $("workers").tHead.rows[0].cells) {
      th.className = th.dataset.key === data.sort ? "sorted " + (data.descending ? "desc" : "asc") : "";
    }
    $("workers").dataset.sort = data.sort + ":" + (data.descending ? "desc" : "asc");
    $("workers").dataset.total = String(data.total);
    this.mark();
  },
  makeSlot() {
    const cells = WORKER_COLUMNS.map(([key, , , spark]) => {
      const td = el("td", {class: key === "name" ? "name" : ""});
      if (spark) {
        td.append(el("span", {class: "value"}), " ", el("span", {class: "spark"}));
      }
      return td;
    });
    const tr = el("tr", {}, ...cells);
    const slot = {tr, cells, charts: {}};
    tr.addEventListener("click", () => this.select(slot.name));
    return slot;
  },
  fill(slot, r) {
    slot.name = r.name;
    slot.tr.dataset.worker = r.name;
    slot.tr.className = ["lost", "left", "gone"].includes(r.state) ? "departed" : "";
    WORKER_COLUMNS.forEach(([key, , show, spark], i) => {
      const td = slot.cells[i];
      if (key === "state") {
        const label = el("span", {class: "state state-" + r.state.replace(" ", "-"), text: r.state});
        if (r.reason) label.title = r.reason;
        td.replaceChildren(label);
      } else if (spark) {
        td.firstChild.textContent = show(r);
        this.spark(slot, key, td.lastChild, r[spark], key === "cpu" ? "#4e79a7" : "#59a14f");
      } else {
        td.textContent = show(r);
        if (key === "name") td.title = r.name;
        if (key === "capabilities") td.title = r.capabilities.join(", ");
      }
    });
  },
  spark(slot, key, node, values, color) {
    let chart = slot.charts[key];
    if (!chart) {
      chart = slot.charts[key] = echarts.init(node, null, {renderer: "svg", width: 120, height: 24});
      chart.setOption({animation: false, silent: true, grid: {left: 1, right: 1, top: 2, bottom: 2},
                       xAxis: {type: "category", show: false, boundaryGap: false}, yAxis: {type: "value", show: false, min: 0},
                       series: [{type: "line", showSymbol: false, color, lineStyle: {width: 1},
                                 areaStyle: {opacity: 0.2}, data: []}]});
    }
    const key2 = values.join(",");
    if (node.dataset.points !== key2) {
      node.dataset.points = key2;
      chart.setOption({xAxis: {data: values.map((_, i) => i)}, series: [{data: values}]});
    }
  },
  select(name) {
    this.selected = name;
    $("worker-detail").hidden = false;
    this.resize();
    this.mark();
    this.detail();
  },
  mark() {
    for (const slot of this.slots) slot.tr.classList.toggle("selected", slot.name === this.selected);
  },
  async detail() {
    const name = this.selected;
    let d;
    try { d = await getJSON("/api/worker?name=" + encodeURIComponent(name)); } catch (e) { d = null; }
    if (name !== this.selected) return;
    $("detail-title").textContent = name;
    $("worker-detail").dataset.worker = name;
    if (!d) { $("detail-reason").textContent = "no longer known to scaler_ui"; return; }
    $("detail-reason").textContent = d.reason ? d.state + " at " + clock(d.departed_ms) + ": " + d.reason : "state: " + d.state;
    pairs("detail-fields", [
      ["agent cpu", percent(d.agent_cpu)], ["agent memory", bytes(d.agent_rss)],
      ["processors cpu", percent(d.processor_cpu)], ["processors memory", bytes(d.processor_rss)],
      ["processors", num(d.processors) + (d.blocked ? " (" + num(d.blocked) + " blocked)" : "")],
      ["running", num(d.running)], ["prefetched", num(d.prefetched)], ["waiting on nested tasks", num(d.waiting)],
      ["assigned", num(d.sent)], ["free slots", num(d.free)], ["lag", d.lag_ms.toFixed(2) + " ms"],
      ["completed", num(d.completed)], ["held back", d.held_back_ms ? (d.held_back_ms / 1000).toFixed(0) + " s" : "no"],
      ["last heartbeat", (d.heartbeat_age_ms / 1000).toFixed(1) + " s ago"], ["first seen", clock(d.since_ms)],
      ["capabilities", (d.capabilities || []).join(", ") || "none"],
    ], "field");
    const h = d.history || {};
    const t = h.t || [];
    const line = (name2, values, color, axis) => ({name: name2, type: "line", showSymbol: false, color, yAxisIndex: axis || 0,
                                                   data: (values || []).map((v, i) => [t[i], v])});
    this.usage.setOption({animation: false, grid: {left: 48, right: 64, top: 28, bottom: 22}, legend: {top: 0},
      tooltip: {trigger: "axis"}, xAxis: TIME_AXIS,
      yAxis: [{type: "value", min: 0, axisLabel: {formatter: v => v + "%"}},
              {type: "value", min: 0, axisLabel: {formatter: compactBytes}, splitLine: {show: false}}],
      series: [line("cpu", h.cpu, "#4e79a7"), line("memory", h.rss, "#59a14f", 1)]});
    this.queue.setOption({animation: false, grid: {left: 48, right: 64, top: 28, bottom: 22}, legend: {top: 0},
      tooltip: {trigger: "axis"}, xAxis: TIME_AXIS,
      yAxis: [{type: "value", min: 0, minInterval: 1}, {type: "value", min: 0, splitLine: {show: false},
              axisLabel: {formatter: v => v + " ms"}}],
      series: [line("running", h.running, "#59a14f"), line("prefetched", h.prefetched, "#f28e2b"), line("lag", h.lag_ms, "#b07aa1", 1)]});
    $("detail-tasks").tBodies[0].replaceChildren(...(d.tasks || []).slice(0, 30).map(task => el("tr", {},
      el("td", {text: clock(task.end)}), el("td", {class: "name", text: task.function}),
      el("td", {text: runTime(task)}), el("td", {class: statusClass(task.status), text: task.status}))));
  },
  resize() { this.usage.resize(); this.queue.resize(); },
};

// ------------------------------------------------------------------------------------------------ tasks and failures
async function taskDetail(task) {
  const d = await getJSON("/api/task?id=" + encodeURIComponent(task));
  const parts = [];
  for (const f of d.failures) {
    const what = f.status + (f.cause ? " (" + f.cause + ")" : "");
    parts.push(el("div", {}, el("b", {text: what + " on " + (f.worker || "no worker") + " at " + clock(f.time)})),
               el("pre", {class: "error", text: f.text}));
  }
  for (const run of d.runs) {
    const what = run.status + (run.cause ? " (" + run.cause + ")" : "");
    parts.push(el("div", {class: "muted", text: `${what} on ${run.worker || "no worker"}: started ${clock(run.start)}` +
      (run.end ? `, ended ${clock(run.end)}, ${runTime(run)}` : "") +
      (run.peak_memory ? `, peak memory ${bytes(run.peak_memory)}` : "")}));
  }
  if (d.output.length) {
    parts.push(el("div", {}, el("b", {text: "output"})));
    for (const p of d.output) parts.push(el("pre", {class: p.stream, text: p.text}));
  }
  if (!parts.length) parts.push(el("div", {class: "muted", text: "nothing more is kept about this task"}));
  return parts;
}

const details = new Map(); // task id -> what its expanded row shows, once loaded (the newest 200)

async function openDetail(tr, task, columns) {
  const cell = el("td", {colspan: columns, class: "text"}, el("span", {class: "muted", text: "loading…"}));
  tr.after(el("tr", {class: "expanded", "data-detail": task}, cell));
  if (!details.has(task)) {
    try { details.set(task, await taskDetail(task)); } catch (e) { cell.textContent = String(e); return; }
    if (details.size > 200) details.delete(details.keys().next().value);
  }
  cell.replaceChildren(...details.get(task));
}

function expandable(tr, task, columns, expanded) {
  tr.classList.add("item");
  tr.addEventListener("click", () => {
    const next = tr.nextSibling;
    if (next && next.classList.contains("expanded")) { next.remove(); expanded.delete(task); return; }
    expanded.add(task);
    openDetail(tr, task, columns);
  });
}

const tasks = {
  seq: 0,
  failures: [],
  expanded: new Set(),
  logExpanded: new Set(),
  init() {
    for (const id of ["log-status", "log-function"]) $(id).addEventListener("change", () => refreshSoon());
  },
  reset() { this.seq = 0; this.failures = []; },
  async refresh(summary) {
    const data = await getJSON("/api/failures?since=" + this.seq);
    if (data.epoch !== ui.epoch) return;
    if (data.failures.length || !$("failures").tBodies[0].children.length) {
      this.failures = data.failures.reverse().concat(this.failures).slice(0, FAILURES_KEEP);
      this.renderFailures();
    }
    this.seq = data.seq;
    const select = $("log-function");
    const names = summary.status ? summary.status.functions.map(f => f.name) : [];
    const have = [...select.options].slice(1).map(o => o.value);
    if (names.some(n => !have.includes(n))) {
      const keep = select.value;
      select.replaceChildren(el("option", {value: "", text: "all"}),
        ...[...new Set(have.concat(names))].sort(naturalCompare).map(n => el("option", {value: n, text: n})));
      select.value = keep;
    }
    const q = new URLSearchParams({limit: 200, status: $("log-status").value, function: select.value});
    const log = await getJSON("/api/tasks?" + q);
    this.renderLog(log.tasks);
    const s = summary.status;
    $("log-note").textContent = s && s.sample_every > 1 ? "1 task in " + num(s.sample_every) + " is recorded" : "";
  },
  renderFailures() {
    const body = $("failures").tBodies[0];
    const n = this.failures.length;
    $("failures-title").textContent = !n ? "" : n > FAILURES_SHOWN ? `(the newest ${FAILURES_SHOWN} of ${num(n)} kept)` : `(${num(n)}, newest first)`;
    if (!this.failures.length) {
      body.replaceChildren(el("tr", {}, el("td", {colspan: 6, class: "muted", text: "no failures"})));
      return;
    }
    const rows = [];
    for (const f of this.failures.slice(0, FAILURES_SHOWN)) {
      const tr = el("tr", {"data-task": f.task}, el("td", {text: clock(f.time)}), el("td", {class: "l", text: f.task}),
        el("td", {class: "l name", text: f.function}), el("td", {class: "l", text: f.worker}),
        el("td", {class: "l status-bad", text: f.status + (f.cause ? " (" + f.cause + ")" : "")}),
        el("td", {class: "text", text: f.summary}));
      expandable(tr, f.task, 6, this.expanded);
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    for (const task of [...this.expanded]) {
      const tr = body.querySelector(`tr[data-task="${task}"]`);
      if (tr) openDetail(tr, task, 6);
      else this.expanded.delete(task);
    }
  },
  renderLog(entries) {
    const body = $("task-log").tBodies[0];
    const open = [...body.querySelectorAll("tr.expanded")].map(tr => tr.dataset.detail);
    if (open.length) return; // keep what the user is reading in place
    body.replaceChildren(...entries.map(t => {
      const tr = el("tr", {"data-task": t.task}, el("td", {text: clock(t.end)}), el("td", {class: "l", text: t.task}),
        el("td", {class: "l name", text: t.function}), el("td", {class: "l", text: t.worker}), el("td", {text: runTime(t)}),
        el("td", {text: t.peak_memory ? bytes(t.peak_memory) : ""}), el("td", {class: statusClass(t.status), text: t.status + (t.cause ? " (" + t.cause + ")" : "")}));
      expandable(tr, t.task, 7, this.logExpanded);
      return tr;
    }));
    if (!entries.length) body.append(el("tr", {}, el("td", {colspan: 7, class: "muted", text: "no tasks recorded yet"})));
  },
  resize() {},
};

// ------------------------------------------------------------------------------------------------ clients, output
const clients = {
  init() {}, reset() {}, resize() {},
  async refresh(summary) {
    const list = summary.status ? summary.status.clients : [];
    $("clients-title").textContent = "Clients (" + list.length + ")";
    $("clients").tBodies[0].replaceChildren(...list.map(c => el("tr", {"data-client": c.name},
      el("td", {class: "name", title: c.nested ? c.name + ": made inside a task, on a worker" : c.name},
        c.name, ...(c.nested ? [el("span", {class: "tag", text: "nested"})] : [])),
      el("td", {class: "bar-col"}, progressBar([["done", c.completed], ["assigned", c.assigned]], c.completed + c.tasks)),
      el("td", {class: "queued", text: num(c.queued)}), el("td", {class: "assigned", text: num(c.assigned)}),
      el("td", {text: num(c.completed)}), el("td", {text: num(c.objects)}))));
    this.scaling(summary.status);
  },
  scaling(s) {
    const offered = caps => caps.filter(c => !c.startsWith("payload=")).join(", ");
    const waiting = s ? s.waiting : [];
    $("waiting").tBodies[0].replaceChildren(...waiting.map(g => el("tr", {"data-requires": g.capabilities.join(",")},
      el("td", {text: offered(g.capabilities) || "(nothing special)"}), el("td", {text: num(g.tasks)}),
      el("td", {class: "why", text: g.reason}))));
    if (!waiting.length) $("waiting").tBodies[0].append(el("tr", {}, el("td", {colspan: 3, class: "muted", text: "no queued task waits"})));
    const managers = s ? s.managers : [];
    $("managers-title").textContent = "Worker managers (" + managers.length + ")";
    $("units-events").textContent = s && managers.length ? "units started " + num(s.units.started) + ", stopped " +
      num(s.units.stopped) + ", failed to start " + num(s.units.failed) : "";
    $("managers").tBodies[0].replaceChildren(...managers.map(m => el("tr", {"data-manager": m.name},
      el("td", {class: "name", text: m.name}), el("td", {text: num(m.tier)}), el("td", {text: offered(m.capabilities)}),
      el("td", {text: num(m.connected)}), el("td", {text: num(m.draining)}),
      el("td", {text: m.pending ? num(m.pending) + " (oldest " + Math.round(m.oldest_pending_ms / 1000) + " s)" : "0"}),
      el("td", {text: m.min_units + ".." + m.max_units}),
      el("td", {class: m.failures ? "bad" : "", text: m.failures ? m.failures + ": " + m.last_failure +
        (m.retry_in_ms ? " (asked again in " + Math.round(m.retry_in_ms / 1000) + " s)" : "") : "0"}))));
    if (!managers.length) $("managers").tBodies[0].append(el("tr", {}, el("td", {colspan: 8, class: "muted", text: "no worker manager connected (scaler_worker_manager)"})));
  },
};

const output = {
  seq: 0,
  pieces: [],
  init() {}, resize() {},
  reset() { this.seq = 0; this.pieces = []; },
  async refresh() {
    const data = await getJSON("/api/outputs?since=" + this.seq);
    if (data.epoch !== ui.epoch) return;
    const fresh = data.outputs.length || !$("outputs").children.length;
    this.pieces = this.pieces.concat(data.outputs).slice(-OUTPUTS_KEEP);
    this.seq = data.seq;
    if (fresh) this.render();
  },
  render() {
    const byTask = new Map();
    for (const p of this.pieces) {
      const entry = byTask.get(p.task) || {task: p.task, fn: p.function, worker: p.worker, time: 0, pieces: []};
      entry.pieces.push(p);
      entry.time = Math.max(entry.time, p.time);
      byTask.set(p.task, entry);
    }
    const list = [...byTask.values()].sort((a, b) => b.time - a.time).slice(0, OUTPUT_TASKS_SHOWN);
    if (!list.length) {
      $("outputs").replaceChildren(el("p", {class: "muted", text: "no output yet"}));
      return;
    }
    $("outputs").replaceChildren(...list.map(e => el("div", {class: "output-task", "data-task": e.task},
      el("h3", {}, e.fn, el("span", {class: "muted", text: ` task ${e.task} on ${e.worker}, ${clock(e.time)}`})),
      ...e.pieces.map(p => el("pre", {class: p.stream, text: p.text})))));
  },
};

// ------------------------------------------------------------------------------------------------ the loop
const VIEWS = {overview, stream, workers, tasks, clients, output};
const ui = {epoch: null, view: "overview", timer: null, busy: false, again: false};

const RESTART_NOTICE_MS = 10 * 60 * 1000;  // how long the banner says the scheduler restarted

function restartText(restart) {
  // The scheduler restarted while this page watched it: when, after how long away, and what its journal brought back.
  const away = restart.away_ms >= 1000 ? Math.round(restart.away_ms / 1000) + " s" : restart.away_ms + " ms";
  return " · the scheduler restarted at " + clock(restart.time) + " after " + away + " away" +
    (restart.recovered ? " and resumed from its journal: " + restart.recovered : " with nothing carried over");
}

function header(summary) {
  const s = summary.status;
  const address = summary.monitor_address;
  if (s === null) {
    banner("waiting for a status from " + address + " (is a scheduler running with that monitor address?)", true);
    $("chips").replaceChildren();
    return;
  }
  if (summary.age_seconds > STALE_SECONDS) {
    banner("the latest status from " + address + " is " + Math.round(summary.age_seconds) +
           " s old: the scheduler may have stopped", true);
  } else {
    const last = (s.restarts || []).slice(-1)[0];
    const recent = last && s.time - last.time < RESTART_NOTICE_MS;
    banner("live from " + address + (recent ? restartText(last) : ""), false);
  }
  $("scheduler-name").textContent = s.scheduler_name;
  const rate = (overview.latest("success_rate") || 0) + (overview.latest("failed_rate") || 0);
  const states = s.worker_states || {};
  const trouble = (states.lost || 0) + (states.stale || 0) + (states["held back"] || 0);
  const chip = (label, value, bad) => el("span", {class: "chip" + (bad ? " bad" : "")}, label + " ", el("b", {text: value}));
  $("chips").replaceChildren(
    chip("workers", num(s.workers)), chip("needing a look", num(trouble), trouble > 0),
    chip("queued", num(s.tasks_by_state.queued || 0)), chip("assigned", num(s.assigned)),
    chip("running", num(s.running)), chip("tasks/s", rate.toFixed(rate < 10 ? 1 : 0)),
    chip("error", num(s.tasks_by_state.error || 0), (s.tasks_by_state.error || 0) > 0),
    chip("failed", num(s.tasks_by_state.failed || 0), (s.tasks_by_state.failed || 0) > 0),
    chip("events not sent", num(s.dropped_events), s.dropped_events > 0));
  $("count-workers").textContent = num(s.workers);
  $("count-clients").textContent = num(s.clients.length);
  $("count-failures").textContent = s.failures ? num(s.failures) : "";
  $("count-outputs").textContent = s.outputs ? num(s.outputs) : "";
}

async function tick() {
  ui.busy = true;
  const started = performance.now();
  try {
    const summary = await getJSON("/api/summary");
    if (summary.epoch !== ui.epoch) {
      ui.epoch = summary.epoch;
      for (const view of Object.values(VIEWS)) view.reset();
    }
    if (ui.view !== "overview") await overview.fetch();
    header(summary);
    await VIEWS[ui.view].refresh(summary);
    document.body.dataset.updated = String(Date.now());
  } catch (error) {
    banner("scaler_ui is not answering (" + error.message + "); retrying", true);
  } finally {
    ui.busy = false;
  }
  if (ui.again) { ui.again = false; tick(); return; }
  ui.timer = setTimeout(tick, Math.max(200, REFRESH_MS - (performance.now() - started)));
}

function refreshSoon() {
  if (ui.busy) { ui.again = true; return; }
  clearTimeout(ui.timer);
  tick();
}

function show() {
  const name = (location.hash || "#overview").slice(1);
  ui.view = VIEWS[name] ? name : "overview";
  for (const node of document.querySelectorAll(".view")) node.classList.toggle("active", node.id === "view-" + ui.view);
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.view === ui.view);
  document.body.dataset.view = ui.view;
  VIEWS[ui.view].resize();
  refreshSoon();
}

for (const view of Object.values(VIEWS)) view.init();
window.addEventListener("hashchange", show);
window.addEventListener("resize", () => VIEWS[ui.view].resize());
show();
