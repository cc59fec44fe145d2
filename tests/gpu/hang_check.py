"""--hang-timeout on a real GPU (issue 30 part 4), for a machine with CUDA,
NCCL and torch 2.x: `python3 tests/gpu/hang_check.py TRUN OUTDIR`.

1. cold: one rank blocked behind a long GPU kernel (tests/fixtures/gpu_hang.py)
   with torch's flight recorder pipe turned on: the report names rank 0 in
   torch.cuda.synchronize called from the script's line, within the timeout
   plus 3 s; --hang-action fail ends it as a failure whose root cause says
   so; the recorder's dump is collected and named.
2. warm (forkserver): the same without the recorder's variables: reported,
   and no dump asked for.
3. compute: a silent GPU loop that synchronizes after each step: not
   reported (a measurement of the sampling rule's known limit).
Prints one JSON line per case and exits 1 if an expectation failed.
No pytest: it runs where only torch is (tests/integration/test_gpu.py runs
it under pytest where a GPU is)."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "fixtures" / "gpu_hang.py"
SYNC_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                 if "SYNC_LINE" in line)


def run_case(trun, out, name, args, env_extra, timeout):
    events = out / f"{name}.jsonl"
    env = dict(os.environ, **env_extra)
    cmd = [trun, "--standalone", "--nproc-per-node", "1", "--max-restarts", "0",
           "--event-log-file", str(events), *args]
    start = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    text = p.stdout.decode(errors="replace")
    (out / f"{name}.log").write_text(text)
    evs = [json.loads(x) for x in events.read_text().splitlines()] if events.exists() else []
    return p.returncode, text, evs, time.time() - start


def main():
    trun, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    results, failed = [], False
    hang_args = ["--hang-timeout", "5", "--hang-action", "fail"]
    for name, method, fr in (("cold", "spawn", True), ("warm", "forkserver", False)):
        stamp = out / f"{name}.t"
        env = {}
        if fr:
            env = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                   "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(out / "fr_pipe_"),
                   "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(out / "fr_dump_")}
        rc, text, evs, took = run_case(trun, out, name,
                                       ["--start-method", method, *hang_args, str(SCRIPT),
                                        str(stamp)], env, 240)
        hung = [e for e in evs if e["name"] == "trun.group.hung"]
        dumps = [e for e in evs if e["name"] == "trun.group.flight_recorder"]
        r = {"case": name, "rc": rc, "seconds": round(took, 1), "hung_events": len(hung)}
        if hung and stamp.exists():
            r["reported_after_s"] = round(hung[0]["timestamp"] / 1000 - float(stamp.read_text()), 2)
            r["summary"] = hung[0]["metadata"]["summary"]
        r["dumps"] = [d["metadata"]["dumps"] for d in dumps]
        where = re.search(r"rank 0: in synchronize at \S+:\d+, called from wait_for_the_device "
                          rf"at {SCRIPT.name}:{SYNC_LINE}", text)
        checks = {
            "exit 1": rc == 1,
            "one report naming synchronize at the script's line": len(hung) == 1 and bool(where),
            "within the timeout plus 3 s": r.get("reported_after_s", 99) <= 8,
            "root cause says it hung": "hung: no progress for 5 s" in text,
        }
        if fr:
            ok = (len(dumps) == 1 and dumps[0]["metadata"]["dumps"][0]["bytes"]
                  and (out / "fr_dump_0").exists())
            checks["flight recorder dump collected"] = bool(ok)
        else:
            checks["no dump asked for"] = not dumps
        r["checks"] = checks
        failed |= not all(checks.values())
        results.append(r)
        print(json.dumps(r), flush=True)
    rc, text, evs, took = run_case(trun, out, "compute",
                                   ["--hang-timeout", "3", str(SCRIPT), "--compute"], {}, 240)
    hung = [e for e in evs if e["name"] == "trun.group.hung"]
    r = {"case": "compute", "rc": rc, "seconds": round(took, 1), "hung_events": len(hung),
         "checks": {"exit 0": rc == 0, "not reported": not hung}}
    failed |= not all(r["checks"].values())
    print(json.dumps(r), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
