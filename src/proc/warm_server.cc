#include "proc/warm_server.h"

namespace trun::proc {

// Reads the program, one frame, from the socket; `sock` is left for it.
const char kWarmBootstrap[] = R"(import socket
sock = socket.socket(fileno=0)
size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), 'big')
program = sock.recv(size, socket.MSG_WAITALL)
if len(program) < size:
    raise SystemExit(0)
exec(compile(program, '<trun-warm>', 'exec'))
)";

// Why each step is as it is:
// - A *spare* child is forked ahead of each request and is the one that
//   reads it; it forks the worker, reports the pid to the warm process and
//   exits, so the worker is reparented to trun. Only that one fork is on a
//   restart's path; the next spare is forked while trun handles the answer.
//   The warm process answers trun once the spare is reaped, so the worker is
//   trun's child by then. A spare dies with the warm process
//   (PR_SET_PDEATHSIG), and a worker whose spare died before releasing it
//   (`gate`) exits without running anything.
// - The worker then waits for the kernel to finish reparenting it; only
//   then is PR_SET_PDEATHSIG meaningful (it is tied to the parent of the
//   moment), and it checks that the parent is trun.
// - gc.freeze() after the imports: workers' collections skip what the
//   warm process imported, so its pages stay shared.
// - A fresh `__main__` module per worker, filled in as Python fills it for
//   a script (`__file__` absolute since 3.9, a SourceFileLoader), so the
//   warm process's own globals never leak into the script's.
// - An uncaught exception is printed by sys.excepthook without the frames
//   of this program and runpy, then the interpreter exits 1 through its
//   usual path (atexit, thread joins), as `python script.py` does.
// - A worker that ends with a plain status (0 to 255: a return, sys.exit(N),
//   an uncaught exception) still finalizes Python as a cold one does
//   (threads joined, atexit, modules torn down, every __del__), but ends
//   with _exit(status) once C's exit() begins, after flushing C's streams
//   (fflush(NULL)): the C++ static destructors of the libraries the warm
//   process loaded are skipped. Run in a forked copy, they write to nearly
//   every page libtorch shares with the warm process (its operator
//   registry unregisters itself), a copy-on-write fault and a TLB flush each:
//   1.1 s of CPU per worker with torch 1.13 and 1.0 s with torch 2.14 on a
//   2-core machine, more than the import that warm start saves, on every
//   worker's exit. A status Python sets itself at that point (120: stdout
//   could not be flushed) is kept: the C handlers are registered only after
//   the last atexit function flushed sys.stdout and sys.stderr. An exit by
//   KeyboardInterrupt (Python ends by SIGINT then) or another status keeps
//   the usual path.
const char kWarmServer[] =
    R"(import atexit, builtins, ctypes, gc, importlib.machinery, io, os, runpy, signal, struct, sys, types

PR_SET_PDEATHSIG = 1
libc = ctypes.CDLL(None, use_errno=True)


def send(text):
    data = text.encode('utf-8', 'replace')
    sock.sendall(struct.pack('!I', len(data)) + data)


def receive():
    head, fds, _, _ = socket.recv_fds(sock, 4, 3)
    if not head:
        return None, None
    while len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            return None, None
        head += more
    (size,) = struct.unpack('!I', head)
    data = b''
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            return None, None
        data += more
    return fds, data


def parse(data):
    fields = data.split(b'\0')
    if fields[0] != b'trun-warm-1':
        raise ValueError('not a trun-warm-1 request')
    parent, cwd, kind, target = int(fields[1]), fields[2], fields[3].decode(), fields[4]
    n = int(fields[5])
    args = fields[6:6 + n]
    m = int(fields[6 + n])
    env = fields[7 + n:7 + n + m]
    return parent, cwd, kind, target, args, env


def become_worker(fds, request, gate, spare):
    parent, cwd, kind, target, args, env = request
    sock.detach()
    os.setpgid(0, 0)
    released = os.read(gate, 1)
    os.close(gate)
    if not released:
        os._exit(1)
    while os.getppid() == spare:
        os.sched_yield()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(cwd)
    os.environb.clear()
    for kv in env:
        key, _, value = kv.partition(b'=')
        if key:
            os.environb[key] = value
    if 'numpy.random' in sys.modules:
        sys.modules['numpy.random'].seed()
    main = types.ModuleType('__main__')
    main.__builtins__ = builtins
    main.__annotations__ = {}
    sys.modules['__main__'] = main
    target = os.fsdecode(target)
    argv = [os.fsdecode(a) for a in args]
    if kind == 'script':
        sys.argv = [target] + argv
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        path = os.path.abspath(target)
        main.__file__, main.__cached__ = path, None
        main.__loader__ = importlib.machinery.SourceFileLoader('__main__', path)

        def run_script():
            with io.open_code(path) as f:
                code = compile(f.read(), path, 'exec')
            exec(code, main.__dict__)
        return run_script
    if kind == 'module':
        sys.argv = ['-m'] + argv
        sys.path[0] = os.getcwd()
        return lambda: runpy.run_module(target, run_name='__main__', alter_sys=True)
    sys.argv = ['-c'] + argv
    sys.path[0] = ''
    main.__loader__ = importlib.machinery.BuiltinImporter
    return lambda: exec(compile(target, '<string>', 'exec'), main.__dict__)


def handle_one(failure, report, server):
    """In the spare: takes one request, forks its worker, reports, exits."""
    spare = os.getpid()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:
        os._exit(1)
    fds, data = receive()
    if data is None:
        os._exit(0)
    if failure:
        os.write(report, ('error ' + failure).encode())
        os._exit(1)
    try:
        request = parse(data)
        gate_r, gate_w = os.pipe()
        pid = os.fork()
    except Exception as e:
        os.write(report, f'error {type(e).__name__}: {e}'.encode())
        os._exit(1)
    if pid == 0:
        os.close(report)
        os.close(gate_w)
        return become_worker(fds, request, gate_r, spare)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    os.write(report, f'ok {pid}'.encode())
    os.write(gate_w, b'.')
    os._exit(0)


def serve(failure):
    server = os.getpid()
    while True:
        report_r, report_w = os.pipe()
        spare = os.fork()
        if spare == 0:
            os.close(report_r)
            return handle_one(failure, report_w, server)
        os.close(report_w)
        answer = b''
        while more := os.read(report_r, 65536):
            answer += more
        os.close(report_r)
        os.waitpid(spare, 0)
        if not answer:
            os._exit(0)
        send(answer.decode('utf-8', 'replace'))
        if failure:
            os._exit(1)


def preload(modules):
    for name in modules:
        try:
            __import__(name)
        except BaseException as e:
            return f'cannot import {name}: {type(e).__name__}: {e}'
    threads = len(os.listdir('/proc/self/task'))
    if threads > 1:
        return (f'importing {", ".join(modules)} started {threads - 1} thread(s); forking '
                'a process with threads is unsafe, so warm start cannot use it')
    return ''


def hide_frames(tb):
    ours = ('<trun-warm>', runpy.run_path.__code__.co_filename)
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def plain_status(code):
    if code is None:
        return 0
    if type(code) is int and 0 <= code <= 255:
        return code
    return None


status = None


def end_without_c_destructors():
    if status is None:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        return
    atexit_c = libc.__cxa_atexit
    atexit_c.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    atexit_c(ctypes.cast(libc._exit, ctypes.c_void_p), status, None)
    atexit_c(ctypes.cast(libc.fflush, ctypes.c_void_p), None, None)


failure = preload(sys.argv[1:])
gc.freeze()
send('ready')
job = serve(failure)
atexit.register(end_without_c_destructors)
try:
    job()
    status = 0
except SystemExit as e:
    status = plain_status(e.code)
    raise
except KeyboardInterrupt:
    raise
except BaseException as e:
    e = e.with_traceback(hide_frames(e.__traceback__))
    sys.excepthook(type(e), e, e.__traceback__)
    status = 1
    sys.exit(1)
)";

}  // namespace trun::proc
