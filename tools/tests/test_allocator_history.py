#!/usr/bin/env python3
"""tools/allocator-history and `stratsim allocator` end to end, without PyTorch: a snapshot pickle
built as torch.cuda.memory._dump_snapshot lays one out, from a history one H200 recorded
(benchmarks/accuracy/gpu/measured/h200/memory/), converted and replayed; the replay must reach the
reserved peak PyTorch measured. Also the converter's refusals (exit 2, one line).

    STRATSIM_BINARY=build/stratsim python3 tools/tests/test_allocator_history.py
"""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "allocator-history")
RECORDED = os.path.join(ROOT, "benchmarks", "accuracy", "gpu", "measured", "h200", "memory", "llama2_selective_op.json.gz")
BINARY = os.environ.get("STRATSIM_BINARY", os.path.join(ROOT, "build", "stratsim"))


def snapshot_of(recorded: dict) -> dict:
    """The recorded history in _dump_snapshot's layout (TraceEntry dicts, with frames)."""
    entries = [{"action": a, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": []}
               for a, addr, size, stream, t in recorded["trace"]]
    entries.insert(1, {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 0, "frames": []})
    segments = [{"device": 0, "address": s["address"], "total_size": s["total_size"], "stream": s["stream"],
                 "segment_type": s["segment_type"], "allocated_size": 0, "active_size": 0,
                 "blocks": [{"size": b[0], "requested_size": b[1], "state": b[2], "frames": []} for b in s["blocks"]]}
                for s in recorded["segments"]]
    return {"segments": segments, "device_traces": [entries], "allocator_settings": recorded["allocator_settings"]}


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def main() -> int:
    with gzip.open(RECORDED, "rt") as f:
        recorded = json.load(f)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        pickle_path = os.path.join(tmp, "snapshot.pickle")
        with open(pickle_path, "wb") as f:
            pickle.dump(snapshot_of(recorded), f)
        history = os.path.join(tmp, "history.json.gz")
        done = run(pickle_path, "-o", history)
        if done.returncode != 0:
            failures.append(f"convert: exit {done.returncode}: {done.stderr}")
        else:
            replay = subprocess.run([BINARY, "allocator", history, "--json"], capture_output=True, text=True)
            if replay.returncode != 0:
                failures.append(f"stratsim allocator: exit {replay.returncode}: {replay.stderr}")
            else:
                result = json.loads(replay.stdout)
                want = recorded["stats"]["reserved_bytes.all.peak"]
                got = result["default_segments"]["reserved_peak_bytes"]
                if got != want:
                    failures.append(f"reserved peak {got}, PyTorch measured {want}")
                if result["allocations"] != sum(1 for e in recorded["trace"] if e[0] == "alloc"):
                    failures.append(f"allocations {result['allocations']}")

        # Refusals: not a pickle; a history that frees what it never allocated.
        not_pickle = os.path.join(tmp, "text.pickle")
        with open(not_pickle, "w") as f:
            f.write("not a pickle\n")
        late = os.path.join(tmp, "late.pickle")
        with open(late, "wb") as f:
            pickle.dump({"device_traces": [[{"action": "free_completed", "addr": 4096, "size": 512, "stream": 0}]]}, f)
        for path, words in ((not_pickle, "not a readable snapshot"), (late, "allocated before the history begins")):
            done = run(path, "-o", os.path.join(tmp, "x.json"))
            if done.returncode != 2 or words not in done.stderr or done.stderr.count("\n") != 1:
                failures.append(f"{os.path.basename(path)}: exit {done.returncode}, stderr {done.stderr!r}")
            if os.path.exists(os.path.join(tmp, "x.json")):
                failures.append(f"{os.path.basename(path)}: output left behind")
    for failure in failures:
        print("FAIL:", failure)
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
