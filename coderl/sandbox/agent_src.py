"""The exec agent that runs inside a bwrap sandbox (stdlib only; sent as ``python -c`` source).

Protocol on stdin/stdout: frames of an 8-byte big-endian length and a body. Request (host to agent): a
``marshal``-encoded dict ``{"argv": [...], "env": {...}, "cwd": "...", "timeout": s, "cap": bytes}``.
Reply (agent to host): a JSON object ``{"exit_code", "stdout" (base64), "stderr" (base64), "timed_out",
"truncated", "duration_s", "retire"}``; JSON because the host parses it and the
agent shares its sandbox with the commands it runs (``marshal`` is not safe to read from them).

The agent imports only built-in modules (os, sys, marshal, binascii, select, time, _signal) and the
small ``resource`` extension (0.3 ms): it starts in every sandbox, and ``json``, ``base64``,
``subprocess``, ``selectors`` and ``signal`` (with the ``re`` and ``enum`` they pull in) cost 8.7 ms
of CPU on each start, measured 2026-11-25 on 2 cores: 14.0 ms for ``python3 -I -S`` with those
imports against 5.3 ms without.
Arguments: the sandbox's rlimits (``cpu=120,as=...``, :meth:`coderl.sandbox.runner.Limits.rlimits`)
and the output cap. The agent holds the rlimits itself, so the commands it starts inherit them (a
``true`` through the agent: 1.7 → 0.9 ms of CPU without a ``prlimit`` exec, measured 2026-11-25); it
retires (``"retire": true``, then exits) once its own CPU passes half the CPU limit.
After every command the agent kills every other process in the sandbox's PID namespace (except
PID 1, bwrap's init), so no process outlives its exec, detached daemons included. Run anywhere but as
PID 2 of such a namespace (bwrap's init is 1), it refuses to start: on a host it would kill every
process it may signal.
"""

AGENT_SOURCE = r"""
import _signal, binascii, marshal, os, select, sys, time
if os.getpid() != 2:  # kill_all() kills every process it can see: only in a sandbox's own PID namespace
    sys.exit("the coderl exec agent runs only as PID 2 of a bwrap sandbox's PID namespace, not here")
inp, out = sys.stdin.buffer, sys.stdout.buffer
LIMITS = dict((k, int(v)) for k, v in (item.split("=") for item in sys.argv[1].split(",")))
CAP = int(sys.argv[2])
def hold_limits():
    # The agent takes the sandbox's rlimits on itself (soft and hard, so nothing can raise them) and
    # every command it starts inherits them: no prlimit to exec per command. Only where the agent
    # itself fits under them: the address space (its own plus room for a reply of two full output
    # buffers, base64'd) and the open files; else each command goes through prlimit.
    try:
        import resource
    except ImportError:
        return False
    own = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    if LIMITS["as"] < own + 8 * CAP + (256 << 20) or LIMITS["nofile"] < 32:
        return False
    names = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC,
             "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}
    for name, value in LIMITS.items():
        resource.setrlimit(names[name], (value, value))
    return True
HELD = hold_limits()
PRLIMIT = [] if HELD else ["prlimit"] + ["--%s=%d" % kv for kv in LIMITS.items()] + ["--"]
RETIRING = False
def retiring():
    # The agent's own CPU counts against the limit it holds: past half of it, it says so in its
    # reply and exits, and the host starts a fresh one (the workspace stays) before the next command.
    # Decided once per reply, so that what the reply says is what the agent then does.
    global RETIRING
    t = os.times()
    RETIRING = HELD and t.user + t.system > LIMITS["cpu"] / 2
    return RETIRING
def read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = inp.read(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return buf
def frame(body):
    out.write(len(body).to_bytes(8, "big") + body)
    out.flush()
def kill_all():
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            try:
                os.kill(int(name), 9)
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
def b64(data):
    return binascii.b2a_base64(data, newline=False).decode()
def reply(code, o, e, timed_out, truncated, took):
    return ('{"exit_code": %d, "stdout": "%s", "stderr": "%s", "timed_out": %s, "truncated": %s, "duration_s": %r, "retire": %s}'
            % (code, b64(o), b64(e), "true" if timed_out else "false", "true" if truncated else "false", float(took),
               "true" if retiring() else "false")).encode()
def spawn(argv, cwd, env):
    # posix_spawn (what subprocess.Popen does, without importing it): a new session, stdin from
    # /dev/null, stdout and stderr to pipes, SIGPIPE and SIGXFSZ back to their defaults (Python ignores
    # them). The agent runs one command at a time, so it moves to the command's folder to start it.
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, w_out, 1), (os.POSIX_SPAWN_DUP2, w_err, 2)]
    try:
        os.chdir(cwd)
        pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True,
                              setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError as exc:
        for fd in (r_out, w_out, r_err, w_err):
            os.close(fd)
        return None, str(exc).encode()
    finally:
        os.chdir("/")
    os.close(w_out)
    os.close(w_err)
    return (pid, r_out, r_err), b""
def exit_code(status):
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
def run(req):
    start = time.monotonic()
    cap = req["cap"]
    child, failure = spawn(PRLIMIT + req["argv"], req["cwd"], req["env"])
    if child is None:
        return reply(127, b"", failure, False, False, 0.0)
    pid, r_out, r_err = child
    bufs = {r_out: bytearray(), r_err: bytearray()}
    dropped = 0
    timed_out = False
    exited = None
    code = None
    poller = select.poll()
    for fd in bufs:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    open_fds = set(bufs)
    # The command's exit is a descriptor too (a pidfd, Linux 5.3+): it is noticed the moment it
    # happens, not at the next turn of a sleep. Output closed is not the end (coreutils close
    # stdout/stderr *before* exiting, and a command may go on with its output closed), and the end is
    # not output closed (a background child may hold the pipes): 0.2 s after the exit, stop reading.
    try:
        pidfd = os.pidfd_open(pid)
        poller.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):
        pidfd = -1
    while True:
        now = time.monotonic()
        if not timed_out and now - start > req["timeout"]:
            timed_out = True
            kill_all()
        if code is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code, exited = exit_code(status), now
                if pidfd >= 0:
                    poller.unregister(pidfd)
                    os.close(pidfd)
                    pidfd = -1
        if code is not None and (not open_fds or now - exited > 0.2):
            break
        if code is None and not open_fds and pidfd < 0:
            time.sleep(0.005)  # no pidfd to wait on (an old kernel): look again shortly
            continue
        for fd, _ in poller.poll(100 if code is None else 20):
            if fd == pidfd:
                continue  # the exit: collected at the top of the loop
            data = os.read(fd, 65536)
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            buf = bufs[fd]
            room = cap - len(buf)
            if room > 0:
                buf += data[:room]
            dropped += max(0, len(data) - max(room, 0))
    kill_all()
    reap()
    os.close(r_out)
    os.close(r_err)
    o, e = bufs.values()
    return reply(code, bytes(o), bytes(e), timed_out, dropped > 0, time.monotonic() - start)
frame(b"{}")
while True:
    n = int.from_bytes(read_exact(8), "big")
    frame(run(marshal.loads(read_exact(n))))
    if RETIRING:
        sys.exit(0)
"""
