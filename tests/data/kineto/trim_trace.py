# Cuts a Kineto trace down to what stratsim reads (profiler_trace.hpp): metadata, ProfilerStep#N,
# GPU kernels, copies and sets (compute kernels keep only their stream arguments),
# record_param_comms, and the launches of the communication kernels. Usage:
#   python3 trim_trace.py IN.json[.gz] OUT.json.gz
import gzip, json, re, sys

COMM = re.compile(r"^nccl|ncclKernel|ncclDevKernel")
src = sys.argv[1]
trace = json.load(gzip.open(src) if src.endswith(".gz") else open(src))
events = trace["traceEvents"]
comm_corr = {e["args"]["correlation"] for e in events
             if e.get("cat") == "kernel" and COMM.search(e.get("name", "")) and "correlation" in e.get("args", {})}
kept = []
for e in events:
    cat, name = e.get("cat"), e.get("name", "")
    if e.get("ph") == "M" or name.startswith("ProfilerStep#") or name == "record_param_comms":
        kept.append(e)
    elif cat == "kernel" and COMM.search(name):
        kept.append(e)
    elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        e = dict(e)
        e["args"] = {k: v for k, v in e.get("args", {}).items() if k in ("device", "stream", "correlation")}
        kept.append(e)
    elif cat == "cuda_runtime" and e.get("args", {}).get("correlation") in comm_corr:
        kept.append(e)
trace["traceEvents"] = kept
trace.pop("INFO", None)
with gzip.open(sys.argv[2], "wt") as out:
    json.dump(trace, out)
print(f"{len(events)} events -> {len(kept)}")
