"""scaler_object_storage_server: opengris-scaler 2.x's object store, which this Scaler does not need (the scheduler
keeps objects). The command says so and exits 0, so that a 2.x start script goes on (issue 29)."""

from __future__ import annotations

import sys

TEXT = (
    "scaler_object_storage_server: this Scaler keeps objects in the scheduler, with no object storage server: "
    "nothing to start. Start scaler_scheduler and scaler_cluster alone (a 2.x --object-storage-address or "
    "object_storage_address is ignored; docs/deploying/config.md)"
)


def main(argv: list[str] | None = None) -> None:
    words = sys.argv[1:] if argv is None else argv
    if any(word in ("-h", "--help") for word in words):
        print(TEXT)
        sys.exit(0)
    print(TEXT, file=sys.stderr)
    sys.exit(0)


if __name__ == "__main__":
    main()
