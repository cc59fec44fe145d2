"""The agent tells what it does: events, /health and /metrics, the file-timer watchdog."""
import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time

from conftest import FIXTURES, TRUN, base_env, free_port, read_events, trun, worker


def names(events):
    return [e["name"] for e in events]


# ---- the watchdog, with torch's own FileTimerClient --------------------------------

def test_watchdog_kills_an_overrunning_worker_at_its_deadline(tmp):
    events = tmp / "events.jsonl"
    t0 = time.monotonic()
    r = trun("--nproc-per-node", 2, "--event-log-file", events, FIXTURES / "timer_worker.py",
             "garbage@1", "overrun:1@1", "release:0.2@0", "sleep:60@0",
             env=base_env(TORCHELASTIC_ENABLE_FILE_TIMER=1), timeout=90)
    assert r.returncode == 1, r.err
    assert time.monotonic() - t0 < 50  # not the workers' 60 s sleeps (30 s met a loaded machine)

    # The failure table names the watchdog; the released timer killed nobody.
    table = r.err[r.err.index("Root Cause"):]
    pid = re.search(r"exitcode  : -9 \(pid: (\d+)\)", table).group(1)
    assert "rank      : 1 (local_rank: 1)" in table
    assert f"watchdog: timer 'overrun' of PID {pid} expired; trun sent SIGKILL" in table
    # The only other failure is rank 0, stopped by trun (torchrun 2.x lists it).
    others = r.err[r.err.index("Failures:"):r.err.index("Root Cause")]
    assert re.findall(r"rank      : (\d+)", others) == ["0"], others
    assert "(SIGTERM)" in others
    # The garbage was survived, and said so.
    assert "watchdog: ignored a malformed request" in r.err
    assert "which is none of this agent's workers" in r.err

    evs = read_events(events)
    (expired,) = [e["metadata"] for e in evs if e["name"] == "trun.watchdog.expired"]
    assert expired["pid"] == int(pid) and expired["local_rank"] == 1
    assert expired["scope_id"] == "overrun" and expired["signal"] == "SIGKILL"
    assert expired["error"] is None
    # Signalled at its deadline, not on a polling tick (loose bound: a loaded CI box).
    assert 0 <= expired["delay_ms"] < 1000, expired
    deadline = float(re.search(r"deadline (\S+)", r.out).group(1))
    assert abs(expired["expiration_time"] - deadline) < 0.5
    exited = {e["metadata"]["local_rank"]: e["metadata"] for e in evs
              if e["name"] == "trun.worker.exited"}
    assert exited[1]["cause"] == "watchdog" and exited[1]["outcome"] == "failed"
    assert exited[0]["outcome"] == "stopped"

    # The FIFO lived in a private directory that is gone now.
    timer_file = evs[0]["metadata"]["timer_file"]
    assert re.search(r"/trun_watchdog_[a-z0-9_]{8}/timer$", timer_file), timer_file
    assert not os.path.exists(os.path.dirname(timer_file))


def test_watchdog_at_a_given_path_and_released_timers(tmp):
    fifo = tmp / "watchdog.fifo"
    r = trun(FIXTURES / "timer_worker.py", "release:0.3",
             env=base_env(TORCHELASTIC_ENABLE_FILE_TIMER=1, TORCHELASTIC_TIMER_FILE=fifo))
    assert r.returncode == 0, r.err
    assert "watchdog" not in r.err
    assert not fifo.exists()


def test_a_timer_file_that_is_not_a_fifo_is_left_alone(tmp):
    precious = tmp / "precious.txt"
    precious.write_text("keep me")
    r = trun("--no-python", "true",
             env=base_env(TORCHELASTIC_ENABLE_FILE_TIMER=1, TORCHELASTIC_TIMER_FILE=precious))
    assert r.returncode == 2
    assert f"TORCHELASTIC_TIMER_FILE {precious}: exists and is not a FIFO" in r.err
    assert precious.read_text() == "keep me"


# ---- events -------------------------------------------------------------------------

def test_events_of_a_run_with_one_restart(tmp):
    events = tmp / "events.jsonl"
    r = trun("--nproc-per-node", 2, "--max-restarts", 1, "--event-log-file", events,
             # A --master-port keeps the one node static, so the run id given
             # is kept (an implied standalone gets a uuid, as torchrun's).
             "--master-port", free_port(), "--rdzv-id", "evjob",
             *worker("exit:5@0#0", "sleep:30@1#0"))
    assert r.returncode == 0, r.err
    evs = read_events(events)
    seq = names(evs)
    # The two workers of the second attempt exit in either order.
    assert seq[:15] == [
        "trun.agent.started", "trun.rendezvous.started", "trun.rendezvous.completed",
        "trun.worker.started", "trun.worker.started",
        "trun.worker.exited", "trun.group.stopping", "trun.worker.exited",
        "trun.rendezvous.started", "trun.rendezvous.completed", "trun.group.restarting",
        "trun.worker.started", "trun.worker.started",
        "trun.worker.exited", "trun.worker.exited"]
    assert seq[15:] == ["trun.group.succeeded", "trun.agent.shutdown"]

    md = [e["metadata"] for e in evs]
    for e in evs:
        assert e["source"] == "AGENT" and isinstance(e["timestamp"], int)
        assert e["metadata"]["run_id"] == "evjob"
    failed, stopped = md[5], md[7]
    assert (failed["local_rank"], failed["exitcode"], failed["outcome"], failed["cause"]) == \
        (0, 5, "failed", "exit_code")
    assert (stopped["local_rank"], stopped["signal"], stopped["outcome"]) == \
        (1, "SIGTERM", "stopped")
    assert md[6]["cause"] == "failure" and "exited with 5" in md[6]["reason"]
    assert md[9]["round"] == 1 and md[9]["restarts"] == 1
    assert md[10]["cause"] == "failure" and md[10]["max_restarts"] == 1
    assert [m["pid"] for m in md[11:13]] != [m["pid"] for m in md[3:5]]
    assert {m["outcome"] for m in md[13:15]} == {"succeeded"}
    assert md[-1]["exit_code"] == 0 and md[-1]["outcome"] == "succeeded"


def test_console_events_go_to_stderr_as_json_lines():
    r = trun("--event-log-handler", "console", "--no-python", "true")
    assert r.returncode == 0, r.err
    lines = [json.loads(l) for l in r.err.splitlines() if l.startswith("{")]
    assert names(lines)[0] == "trun.agent.started"
    assert names(lines)[-1] == "trun.agent.shutdown"


def test_trun_event_log_variable(tmp):
    events = tmp / "env.jsonl"
    r = trun("--no-python", "true", env=base_env(TRUN_EVENT_LOG=events))
    assert r.returncode == 0, r.err
    assert names(read_events(events))[-1] == "trun.agent.shutdown"


# ---- /health and /metrics --------------------------------------------------------------

class Agent:
    """trun in the background, with its health port read from its log."""

    def __init__(self, *args, env=None):
        self.p = subprocess.Popen([TRUN, *map(str, args)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=env or base_env())
        self.err = []
        found = threading.Event()
        self.port = None

        def drain():
            for raw in self.p.stderr:
                line = raw.decode(errors="replace")
                self.err.append(line)
                m = re.search(r"health check at http://[^ ]*:(\d+)/health", line)
                if m:
                    self.port = int(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        assert found.wait(30) and self.port, "".join(self.err)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", path)
        resp = c.getresponse()
        body = resp.read().decode()
        c.close()
        return resp.status, body

    def health(self):
        status, body = self.get("/health")
        return status, json.loads(body)

    def metrics(self):
        status, body = self.get("/metrics")
        assert status == 200
        out = {}
        for line in body.splitlines():
            if line.startswith("#"):
                continue
            m = re.fullmatch(r'([a-z_]+(?:\{[^}]*\})?) (\S+)', line)
            assert m, f"not Prometheus text: {line!r}"
            out[m.group(1)] = float(m.group(2))
        return out

    def wait(self, timeout=60):
        rc = self.p.wait(timeout=timeout)
        return rc

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def until(fn, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_health_and_metrics_during_a_run_and_after_a_worker_dies(tmp):
    d = tmp / "ctl"
    d.mkdir()
    events = tmp / "events.jsonl"
    a = Agent("--nproc-per-node", 2, "--max-restarts", 1, "--health-check-port", 0,
              "--health-check-addr", "127.0.0.1", "--event-log-file", events,
              "--master-port", free_port(), "--rdzv-id", "hjob",
              FIXTURES / "health_worker.py", d)
    try:
        until(lambda: (d / "up.0.0").exists() and (d / "up.0.1").exists(), "attempt 0")
        status, h = a.health()
        assert status == 200, h
        assert (h["status"], h["state"], h["run_id"], h["round"], h["node_rank"], h["restarts"]) == \
            ("healthy", "HEALTHY", "hjob", 0, 0, 0)
        assert [(w["local_rank"], w["rank"], w["state"], w["restarts"]) for w in h["workers"]] == \
            [(0, 0, "running", 0), (1, 1, "running", 0)]
        assert all(w["pid"] > 0 for w in h["workers"])
        m = a.metrics()
        assert m["trun_group_healthy"] == 1
        assert m['trun_workers{state="running"}'] == 2
        assert m["trun_worker_starts_total"] == 2
        assert m["trun_round"] == 0
        assert m['trun_agent_info{run_id="hjob",role="default",version="0.1.0"}'] == 1

        # Local rank 1 dies; local rank 0 holds the group in its stop handler.
        (d / "die").touch()
        status, h = until(lambda: (lambda r: r if r[0] == 503 else None)(a.health()),
                          "503 after the failure")
        assert h["status"] == "unhealthy" and h["state"] == "UNHEALTHY"
        dead = h["workers"][1]
        assert (dead["state"], dead["exitcode"]) == ("failed", 3)
        assert h["workers"][0]["state"] == "running"
        m = a.metrics()
        assert m["trun_group_healthy"] == 0
        assert m['trun_worker_failures_total{cause="exit_code"}'] == 1
        assert m['trun_workers{state="failed"}'] == 1

        # The group restarts and is healthy again.
        (d / "go").touch()
        until(lambda: (d / "stored").exists(), "attempt 1 and its store client")
        status, h = a.health()
        assert status == 200 and h["round"] == 1 and h["restarts"] == 1, h
        assert [w["restarts"] for w in h["workers"]] == [1, 1]
        m = a.metrics()
        assert m['trun_restarts_total{cause="failure"}'] == 1
        assert m["trun_restarts_spent"] == 1
        assert m["trun_worker_starts_total"] == 4
        assert m["trun_round"] == 1
        assert m["trun_rendezvous_duration_seconds_count"] == 2
        assert m["trun_store_connections"] >= 1
        assert m['trun_store_requests_total{op="SET"}'] >= 1
        assert m['trun_http_responses_total{code="503"}'] >= 1

        (d / "done").touch()
        assert a.wait() == 0, "".join(a.err)
    finally:
        a.kill()
    evs = names(read_events(events))
    assert evs.count("trun.group.restarting") == 1
    assert evs[-1] == "trun.agent.shutdown"


def test_http_garbage_and_idle_clients_neither_stall_nor_break_the_agent(tmp):
    d = tmp / "ctl"
    d.mkdir()
    a = Agent("--health-check-port", 0, "--health-check-addr", "127.0.0.1", "--no-python",
              "sh", "-c", f"touch {d}/up; while [ ! -e {d}/done ]; do sleep 0.05; done")
    idle = []
    try:
        until(lambda: (d / "up").exists(), "the worker")
        # Far more idle (slowloris) clients than the server keeps.
        for _ in range(150):
            s = socket.create_connection(("127.0.0.1", a.port))
            s.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
            idle.append(s)
        for junk in (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
                     b"GET /health HTTP/9.9\r\n\r\n",
                     b"POST /health HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n",
                     b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n"):
            s = socket.create_connection(("127.0.0.1", a.port))
            s.sendall(junk)
            reply = s.recv(65536)
            assert re.match(rb"HTTP/1.1 (400|405|413|414|431|505) ", reply), reply
            s.close()
        t0 = time.monotonic()
        status, h = a.health()
        assert status == 200 and h["state"] == "HEALTHY"
        assert time.monotonic() - t0 < 5
        status, body = a.get("/nothing")
        assert status == 404
        m = a.metrics()
        assert m["trun_http_evicted_total"] >= 80
        (d / "done").touch()
        assert a.wait() == 0, "".join(a.err)
    finally:
        for s in idle:
            s.close()
        a.kill()


def test_health_flags_are_checked(tmp):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        r = trun("--health-check-port", port, "--health-check-addr", "127.0.0.1",
                 "--no-python", "true")
        assert r.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}" in r.err and "--health-check-port" in r.err
    finally:
        busy.close()
    r = trun("--health-check-port", 0, "--health-check-addr", "localhost", "--no-python", "true")
    assert r.returncode == 2 and "is not an IP address" in r.err
    r = trun("--health-check-port", "web", "--no-python", "true")
    assert r.returncode == 2 and "--health-check-port" in r.err
    r = trun("--no-python", "true", env=base_env(TORCHELASTIC_HEALTH_CHECK_PORT="-1"))
    assert r.returncode == 2
    r = trun("--event-log-file", tmp / "no" / "such" / "dir.jsonl", "--no-python", "true")
    assert r.returncode == 2 and "--event-log-file" in r.err


# ---- several agents: membership and the rendezvous' events ----------------------------

def test_a_node_joining_is_a_membership_change_in_events_and_health(tmp):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tmp / "ctl"
    d.mkdir()
    wait = f"while [ ! -e {d}/done ]; do sleep 0.05; done"

    def agent(name):
        return Agent("--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     f"127.0.0.1:{port}", "--rdzv-id", "mjob", "--rdzv-conf",
                     "last_call_timeout=0.3,heartbeat_timeout=3", "--health-check-port", 0,
                     "--event-log-file", tmp / f"{name}.jsonl", "--no-python", "sh", "-c", wait)

    a = agent("a")
    b = None
    try:
        until(lambda: a.health()[1]["round"] == 0, "a alone in round 0")
        b = agent("b")
        status, h = until(lambda: (lambda r: r if r[1]["round"] == 1 and r[0] == 200 else None)(
            a.health()), "round 1 with both nodes")
        assert h["run_id"] == "mjob" and [w["rank"] for w in h["workers"]] == [0]
        # b hears of round 1 in its own time, after a does.
        until(lambda: b.health()[1]["node_rank"] == 1, "b's health in round 1")
        (d / "done").touch()
        assert (a.wait(), b.wait()) == (0, 0), "".join(a.err + b.err)
    finally:
        a.kill()
        if b:
            b.kill()
    evs = read_events(tmp / "a.jsonl")
    seq = names(evs)
    changed = evs[seq.index("trun.membership.changed")]["metadata"]
    assert changed["nodes"] == 2 and len(changed["joined"]) == 1 and changed["left"] == []
    stopping = evs[seq.index("trun.group.stopping")]["metadata"]
    assert stopping["cause"] == "round_ended" and stopping["reason"].startswith("membership:")
    restarting = evs[seq.index("trun.group.restarting")]["metadata"]
    assert restarting["cause"] == "membership" and restarting["restarts"] == 0
    completed = [e["metadata"] for e in evs if e["name"] == "trun.rendezvous.completed"]
    assert [(c["round"], c["nodes"]) for c in completed] == [(0, 1), (1, 2)]
