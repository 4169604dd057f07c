"""`python -m benchmarks.table <results_dir>`: print the records of a folder as one comparison table,
with each run's epoch time relative to `single` on the same dataset and model."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def load_records(folder: Path) -> list[dict]:
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except ValueError:
            print(f"skipping unreadable record {path}", file=sys.stderr)
    return records


def rows(records: list[dict]) -> list[list[str]]:
    single = {(r["dataset"], r["model"]): r["summary"]["epoch_time_s_median"]
              for r in records if r["method"] == "single" and r["status"] == "ok"}
    out = []
    for r in sorted(records, key=lambda r: (r["dataset"], r["model"], r["method"], r["workers"])):
        head = [r["dataset"], r["model"], r["method"], str(r["workers"]), r["status"]]
        if r["status"] != "ok":
            out.append(head + ["-"] * 7 + [r.get("error") or ""])
            continue
        s = r["summary"]
        base = single.get((r["dataset"], r["model"]))
        out.append(head + [
            f"{s['epoch_time_s_median']:.4f}",
            f"{s['epoch_time_s_median'] / base:.2f}x" if base else "-",
            f"{s['best_val_acc']:.4f}" if s["best_val_acc"] is not None else "-",
            f"{s['test_acc_at_best_val']:.4f}" if s["test_acc_at_best_val"] is not None else "-",
            f"{s['peak_rss_bytes_max'] / 2**20:.0f}",
            f"{s['train_mem_delta_bytes_max'] / 2**20:.0f}",
            f"{s['comm_bytes_per_epoch'] / 1e6:.2f}",
            "",
        ])
    return out


HEADER = ["dataset", "model", "method", "workers", "status", "epoch_s", "vs_single", "best_val", "test",
          "peak_rss_MiB", "train_MiB", "comm_MB/ep", "error"]


def format_table(table: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [HEADER] + table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [HEADER] + table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0] if argv else "results/runs")
    records = load_records(folder)
    if not records:
        sys.exit(f"error: no records in {folder}; run `python -m benchmarks results_dir={folder}` first")
    print(format_table(rows(records)))
    print("\nepoch_s: median epoch time (max over ranks, warm-up dropped); peak_rss: largest rank's peak RSS; "
          "train_MiB: largest rank's training working set; comm: bytes sent per epoch, all ranks.")


if __name__ == "__main__":
    main()
