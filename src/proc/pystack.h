// Reading a running Python process's stacks from the outside, as a debugger
// would: no cooperation from the process and nothing it can observe (no
// signal, no ptrace stop, no injected code, no change to its environment or
// argv). The agent reads its own workers this way: it is their ancestor and
// runs as the same user, which is what process_vm_readv(2) asks (ptrace
// access mode PTRACE_MODE_ATTACH_REALCREDS; Yama's ptrace_scope 1 would also
// allow an ancestor).
//
// How, step by step:
//   1. The interpreter: the ELF file of /proc/PID/exe, or else of the first
//      mapping of /proc/PID/maps named libpython3*.so* (opened through
//      /proc/PID/root, so a worker in a chroot is read from outside it). Its
//      symbol tables (.dynsym, then .symtab) give `_PyRuntime` (the runtime
//      state) and `Py_Version` (PY_VERSION_HEX, 8 bytes). The load bias is 0
//      for ET_EXEC; for ET_DYN it is the start of the file's mapping at file
//      offset 0 (matched by device and inode) less the first PT_LOAD's page.
//   2. The offsets. Python 3.13 and 3.14 publish them: `_PyRuntime` begins
//      with `_Py_DebugOffsets` (3.13: Include/internal/pycore_runtime.h,
//      3.14: pycore_debug_offsets.h), an array of little-endian uint64: [0]
//      the cookie "xdebugpy", [1] version (PY_VERSION_HEX), [2]
//      free_threaded, then groups of {size, field offsets...} whose members
//      differ between the two (3.14 added fields to the interpreter, thread,
//      frame and code groups and a set group); the indices used are
//      kDebugIndex313 and kDebugIndex314 in pystack.cc, chosen by
//      Py_Version's major.minor. 3.13 has no cframe (PyThreadState's
//      current_frame is the frame), and the frame's f_executable, a plain
//      pointer in 3.13, is a stack reference in 3.14 whose low 2 bits are
//      tags. Python 3.11 publishes none:
//      its offsets are fixed by its headers (x86-64, default build):
//        _PyRuntimeState: interpreters.head @40
//        PyInterpreterState: next @0, threads.head @16
//        PyThreadState: next @8, cframe @56, thread_id @152,
//                       native_thread_id @160; _PyCFrame: current_frame @8
//        _PyInterpreterFrame: f_code @32, previous @48, prev_instr @56
//        PyCodeObject: co_firstlineno @72, co_filename @112, co_name @120,
//                      co_qualname @128, co_linetable @136,
//                      co_code_adaptive @184
//        PyASCIIObject: length @16, state @32 (bits 2-4 kind, 5 compact,
//                       6 ascii), size 48; PyCompactUnicodeObject size 72
//        PyBytesObject: ob_size @16, ob_sval @32; PyTypeObject: tp_name @24
//      Python 3.12 publishes none either; its headers (v3.12 tag:
//      internal/pycore_runtime.h, pycore_interp.h, pycore_frame.h,
//      cpython/pystate.h, code.h, unicodeobject.h) fix, for the same build:
//        _PyRuntimeState: interpreters.head @40 (as 3.11: the fields 3.12
//                         added to it come after `interpreters`)
//        PyInterpreterState: next @0, threads.head @72
//        PyThreadState: next @8, cframe @56, thread_id @136,
//                       native_thread_id @144; _PyCFrame: current_frame @0
//                       (3.11's use_tracing before it is gone)
//        _PyInterpreterFrame: f_code @0, previous @8 (they moved to the
//                       front), prev_instr @56, owner @70 (a char; 3,
//                       FRAME_OWNED_BY_CSTACK, marks an entry frame, whose
//                       f_code is the interpreter's "<interpreter
//                       trampoline>": skipped)
//        PyCodeObject: co_firstlineno @68, co_filename @112, co_name @120,
//                      co_qualname @128, co_linetable @136,
//                      co_code_adaptive @192
//        PyASCIIObject: length @16, state @32 (same bits), size 40 (wstr is
//                       gone); PyCompactUnicodeObject size 72 -> 56
//        PyBytesObject, PyTypeObject: as 3.11
//      The location table and prev_instr's meaning are 3.11's. The layouts
//      are chosen by Py_Version's major.minor: the internal structs keep
//      their layout within a minor version, not across them.
//      pystack_test.cc checks 3.11 against a running /usr/bin/python3.11 and
//      3.12 against pyenv's 3.12 (/root/.pyenv/versions/3.12.1).
//   3. The walk: runtime -> interpreters (linked by next) -> thread states
//      (threads.head, linked by next, newest first) -> the current
//      interpreter frame -> previous ... Each frame's code object (3.14: the
//      f_executable stack reference with its tag bits cleared) must be of a
//      type named "code"; other frames (3.14's interpreter entry frames) are
//      skipped (3.13's and 3.14's entry frames, whose f_executable is
//      None), as are 3.12's entry frames (by their owner) and the frames of
//      the interpreter's shim code objects, whose location table gives no
//      line at all (3.13 and 3.14 finish a specialised class call in one
//      named "__init__").
//   4. The line: the byte offset of the frame's instruction in
//      co_code_adaptive (3.11, 3.12: prev_instr, the last one started; 3.13,
//      3.14: instr_ptr, the one executing) through co_linetable, the location
//      table of Objects/locations.md: LineForOffset below.
//
// A process changes while it is read. Every read is bounded (strings, frames
// per thread, threads, interpreters), a failed read (the memory went away,
// the process exited) ends that thread's walk with `partial` set, and a read
// that fails as a whole is retried a few times. It never blocks on the
// process: process_vm_readv does not wait for it.
//
// Thread-safety: free functions over their arguments; safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::proc {

struct PyFrame {
  std::string function;  // co_qualname ("Model.forward")
  std::string file;      // co_filename
  int line = -1;         // -1: the instruction has no line
};

struct PyThreadStack {
  uint64_t thread_id = 0;       // threading.get_ident()
  pid_t native_id = 0;          // threading.get_native_id(), the kernel's tid
  std::string name;             // /proc/PID/task/TID/comm, "" if unknown
  std::vector<PyFrame> frames;  // innermost first
  bool partial = false;         // the walk stopped early (see the header)
};

struct PyProcessStack {
  pid_t pid = 0;
  std::string version;                 // "3.11.2"
  std::vector<PyThreadStack> threads;  // the main thread first
};

// Every thread's Python stack of process `pid`. NotFound: no such process;
// Unsupported: not a Python this reader knows (the message says which);
// PermissionDenied: not ours to read.
Result<PyProcessStack> ReadPythonStacks(pid_t pid);

// Reads one process's stacks again and again, finding its interpreter once
// (Open: /proc/PID/maps and the ELF file's symbols), so that each Read is a
// few process_vm_readv calls, microseconds: for watching a thread often
// (agent/hang.h). Read fails as ReadPythonStacks does once the process is
// gone; it makes one try, and a walk that the thread outran is partial.
class PyStackReader {
 public:
  static Result<PyStackReader> Open(pid_t pid);
  Result<PyProcessStack> Read();
  PyStackReader(PyStackReader&&) noexcept;
  PyStackReader& operator=(PyStackReader&&) noexcept;
  ~PyStackReader();

 private:
  struct State;
  explicit PyStackReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// What /proc/PID/stat says of a process: its state letter (R, S, D, Z, T...),
// its parent, the CPU time it used, user and system, children excluded, that
// of its children that exited and were waited for (cutime + cstime: theirs
// and, in turn, their own reaped children's), and when it started (clock
// ticks after boot: with the pid, it names one process).
struct ProcStat {
  char state = '?';
  pid_t ppid = 0;
  double cpu_seconds = 0;
  double reaped_children_cpu_seconds = 0;
  uint64_t start_time = 0;
};
Result<ProcStat> ReadProcStat(pid_t pid);

// The source line of the instruction at `byte_offset` in a code object whose
// location table (co_linetable, 3.11 to 3.14's format) is `table` and whose
// first line is `first_line`; -1 where the table gives none.
int LineForOffset(std::string_view table, int first_line, int byte_offset);

}  // namespace trun::proc
