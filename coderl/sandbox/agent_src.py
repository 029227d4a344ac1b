"""The exec agent that runs inside a bwrap sandbox (stdlib only; sent as ``python -c`` source).

Protocol on stdin/stdout: frames of an 8-byte big-endian length and a JSON object. Request:
``{"argv": [...], "env": {...}, "cwd": "...", "timeout": s, "cap": bytes, "limits": [prlimit args]}``.
Reply: ``{"exit_code", "stdout" (base64), "stderr" (base64), "timed_out", "truncated", "duration_s"}``.
After every command the agent kills every other process in the sandbox's PID namespace (except
PID 1, bwrap's init), so no process outlives its exec, detached daemons included.
"""

AGENT_SOURCE = r"""
import base64, json, os, selectors, signal, struct, subprocess, sys, time
inp, out = sys.stdin.buffer, sys.stdout.buffer
def read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = inp.read(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return buf
def kill_all():
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
def run(req):
    start = time.monotonic()
    cap = req["cap"]
    try:
        proc = subprocess.Popen(req["limits"] + req["argv"], cwd=req["cwd"], env=req["env"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return {"exit_code": 127, "stdout": "", "stderr": base64.b64encode(str(exc).encode()).decode(),
                "timed_out": False, "truncated": False, "duration_s": 0.0}
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    dropped = 0
    timed_out = False
    exited = None
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    while sel.get_map():
        now = time.monotonic()
        if not timed_out and now - start > req["timeout"]:
            timed_out = True
            kill_all()
        if exited is None and proc.poll() is not None:
            exited = now
        if exited is not None and now - exited > 0.2:
            break
        for key, _ in sel.select(0.1 if exited is None else 0.02):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
                continue
            buf = bufs[key.fd]
            room = cap - len(buf)
            if room > 0:
                buf += data[:room]
            dropped += max(0, len(data) - max(room, 0))
    sel.close()
    # Output closed is not the end: coreutils close stdout/stderr at exit *before* exiting, and a
    # command may go on with its output closed. Wait for it until its time limit, then kill.
    try:
        code = proc.wait(timeout=max(0.0, req["timeout"] - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_all()
        code = proc.wait()
    kill_all()
    reap()
    proc.stdout.close()
    proc.stderr.close()
    o, e = bufs.values()
    return {"exit_code": code, "stdout": base64.b64encode(bytes(o)).decode(), "stderr": base64.b64encode(bytes(e)).decode(),
            "timed_out": timed_out, "truncated": dropped > 0, "duration_s": time.monotonic() - start}
out.write(struct.pack(">Q", 2) + b"{}")
out.flush()
while True:
    (n,) = struct.unpack(">Q", read_exact(8))
    reply = json.dumps(run(json.loads(read_exact(n)))).encode()
    out.write(struct.pack(">Q", len(reply)) + reply)
    out.flush()
"""
