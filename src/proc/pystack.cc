#include "proc/pystack.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

namespace trun::proc {
namespace {

// Bounds on what one read of a process may walk: a process that changes
// under the reader (or memory that merely looks like a Python runtime) must
// not keep it busy.
constexpr int kMaxInterpreters = 16;
constexpr int kMaxThreads = 512;
constexpr int kMaxFrames = 512;
constexpr size_t kMaxString = 1024;
constexpr size_t kMaxLineTable = 1 << 20;
constexpr int kAttempts = 3;
// _PyInterpreterFrame.owner of an entry frame (3.12's FRAME_OWNED_BY_CSTACK).
constexpr char kFrameOwnedByCStack = 3;

// Where the fields the walk reads are, for one interpreter build.
struct Layout {
  uint64_t runtime_interpreters_head = 0;
  uint64_t interp_next = 0;
  uint64_t interp_threads_head = 0;
  uint64_t thread_next = 0;
  uint64_t thread_cframe = 0;  // 3.11: the _PyCFrame pointer; else unused
  bool has_cframe = false;
  uint64_t cframe_current_frame = 0;
  uint64_t thread_current_frame = 0;  // 3.14: the frame pointer itself
  uint64_t thread_id = 0;
  uint64_t thread_native_id = 0;
  uint64_t frame_previous = 0;
  uint64_t frame_code = 0;
  uint64_t frame_instr = 0;
  // 3.12: frames the C stack owns (the interpreter's entry frames, whose
  // code object is its "<interpreter trampoline>") are no Python code's.
  bool has_owner = false;
  uint64_t frame_owner = 0;
  uint64_t code_ref_tag_mask = 0;  // low bits of a stack reference to clear
  uint64_t code_firstlineno = 0;
  uint64_t code_filename = 0;
  uint64_t code_qualname = 0;
  uint64_t code_linetable = 0;
  uint64_t code_adaptive = 0;
  uint64_t ob_type = 8;
  uint64_t type_name = 24;
  uint64_t bytes_size = 16;
  uint64_t bytes_sval = 32;
  uint64_t unicode_length = 16;
  uint64_t unicode_state = 32;
  uint64_t ascii_size = 0;
  uint64_t compact_size = 0;
};

// Python 3.11's layout (pystack.h lists where each number comes from).
Layout Layout311() {
  Layout l;
  l.runtime_interpreters_head = 40;
  l.interp_next = 0;
  l.interp_threads_head = 16;
  l.thread_next = 8;
  l.has_cframe = true;
  l.thread_cframe = 56;
  l.cframe_current_frame = 8;
  l.thread_id = 152;
  l.thread_native_id = 160;
  l.frame_code = 32;
  l.frame_previous = 48;
  l.frame_instr = 56;
  l.code_firstlineno = 72;
  l.code_filename = 112;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_adaptive = 184;
  l.ascii_size = 48;
  l.compact_size = 72;
  return l;
}

// Python 3.12's layout (pystack.h lists where each number comes from).
Layout Layout312() {
  Layout l;
  l.runtime_interpreters_head = 40;
  l.interp_next = 0;
  l.interp_threads_head = 72;
  l.thread_next = 8;
  l.has_cframe = true;
  l.thread_cframe = 56;
  l.cframe_current_frame = 0;
  l.thread_id = 136;
  l.thread_native_id = 144;
  l.frame_code = 0;
  l.frame_previous = 8;
  l.frame_instr = 56;
  l.has_owner = true;
  l.frame_owner = 70;
  l.code_firstlineno = 68;
  l.code_filename = 112;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_adaptive = 192;
  l.ascii_size = 40;
  l.compact_size = 56;
  return l;
}

// Indices into _Py_DebugOffsets (3.13 and later), read as an array of
// uint64: the struct is only uint64 fields, [0] the cookie, [1] the version,
// [2] free_threaded, then groups of {size, offsets...} whose members and
// order change between minor versions (not within one).
// The tables below give the fields in this order.
struct DebugIndex {
  int count;  // the uint64s to read: up to the last index used
  int interpreters_head;
  int interp_next, interp_threads_head;
  int thread_next, thread_current_frame, thread_id, thread_native_id;
  int frame_previous, frame_executable, frame_instr_ptr;
  int code_filename, code_qualname, code_linetable, code_firstlineno, code_adaptive;
  int pyobject_size, ob_type, type_name;
  int bytes_size, bytes_sval;
  int unicode_state, unicode_length, ascii_size;
  uint64_t executable_tag_mask;  // low bits of f_executable to clear
};
constexpr int kDebugFreeThreaded = 2;

// 3.13 (Include/internal/pycore_runtime.h): runtime_state 3-5,
// interpreter_state 6-18, thread_state 19-27, interpreter_frame 28-33,
// code_object 34-43, pyobject 44-45, type_object 46-49, tuple 50-52, list
// 53-55, dict 56-58, float 59-60, long 61-63, bytes 64-66, unicode 67-70,
// gc 71-72. f_executable is a plain object pointer.
constexpr DebugIndex kDebugIndex313{71, 5,  8,  9,  21, 23, 24, 25, 29, 30, 31, 35, 37,
                                    38, 39, 43, 44, 45, 47, 65, 66, 68, 69, 70, 0};

// 3.14 (Include/internal/pycore_debug_offsets.h): runtime_state 3-5,
// interpreter_state 6-21, thread_state 22-30, interpreter_frame 31-38,
// code_object 39-49, pyobject 50-51, type_object 52-55, tuple 56-58, list
// 59-61, set 62-65, dict 66-68, float 69-70, long 71-73, bytes 74-76,
// unicode 77-80. f_executable is a stack reference, tagged in its low bits.
constexpr DebugIndex kDebugIndex314{81, 5,  8,  9,  24, 26, 27, 28, 32, 33, 34, 40, 42,
                                    43, 44, 48, 50, 51, 53, 75, 76, 78, 79, 80, 3};
constexpr int kMaxDebugCount = std::max(kDebugIndex313.count, kDebugIndex314.count);

class Memory {
 public:
  explicit Memory(pid_t pid) : pid_(pid) {}

  // Reads `n` bytes at `addr`; false if any of them cannot be read.
  bool Read(uint64_t addr, void* out, size_t n) {
    if (addr == 0 || n == 0) return n == 0;
    iovec local{out, n};
    iovec remote{reinterpret_cast<void*>(addr), n};
    ssize_t got = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
    if (got < 0) last_errno_ = errno;
    return got == static_cast<ssize_t>(n);
  }
  bool U64(uint64_t addr, uint64_t* out) { return Read(addr, out, sizeof *out); }
  int last_errno() const { return last_errno_; }

 private:
  pid_t pid_;
  int last_errno_ = 0;
};

struct ElfSymbols {
  bool dynamic = false;  // ET_DYN: loaded at a bias
  uint64_t first_load_page = 0;
  uint64_t runtime = 0;
  uint64_t version = 0;
};

bool PRead(int fd, void* out, size_t n, uint64_t off) {
  return pread(fd, out, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
}

// `_PyRuntime` and `Py_Version` of an ELF file, from .dynsym or .symtab.
std::optional<ElfSymbols> ReadElfSymbols(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  ElfSymbols out;
  Elf64_Ehdr eh{};
  bool ok = PRead(fd, &eh, sizeof eh, 0) && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
            eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_shentsize == sizeof(Elf64_Shdr) &&
            eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_shnum < 4096 && eh.e_phnum < 4096;
  std::vector<Elf64_Shdr> sections(ok ? eh.e_shnum : 0);
  std::vector<Elf64_Phdr> segments(ok ? eh.e_phnum : 0);
  ok = ok && PRead(fd, sections.data(), sections.size() * sizeof(Elf64_Shdr), eh.e_shoff) &&
       PRead(fd, segments.data(), segments.size() * sizeof(Elf64_Phdr), eh.e_phoff);
  if (ok) {
    out.dynamic = eh.e_type == ET_DYN;
    for (const auto& ph : segments) {
      if (ph.p_type == PT_LOAD) {
        out.first_load_page = ph.p_vaddr & ~(ph.p_align > 0 ? ph.p_align - 1 : 0);
        break;
      }
    }
    for (const auto& sh : sections) {
      if ((sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) || sh.sh_link >= sections.size() ||
          sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_size > (256u << 20)) {
        continue;
      }
      const auto& strtab = sections[sh.sh_link];
      if (strtab.sh_size > (256u << 20)) continue;
      std::vector<Elf64_Sym> syms(sh.sh_size / sizeof(Elf64_Sym));
      std::string names(strtab.sh_size, '\0');
      if (!PRead(fd, syms.data(), syms.size() * sizeof(Elf64_Sym), sh.sh_offset) ||
          !PRead(fd, names.data(), names.size(), strtab.sh_offset)) {
        continue;
      }
      for (const auto& s : syms) {
        if (s.st_name >= names.size() || s.st_value == 0) continue;
        const char* name = names.c_str() + s.st_name;
        if (std::strcmp(name, "_PyRuntime") == 0) out.runtime = s.st_value;
        if (std::strcmp(name, "Py_Version") == 0) out.version = s.st_value;
      }
      if (out.runtime != 0 && out.version != 0) break;
    }
  }
  close(fd);
  if (out.runtime == 0 || out.version == 0) return std::nullopt;
  return out;
}

struct Mapping {
  uint64_t start = 0;
  uint64_t offset = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;
};

std::vector<Mapping> ReadMaps(pid_t pid) {
  std::vector<Mapping> maps;
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string range, perms, offset, dev, inode, path;
    ls >> range >> perms >> offset >> dev >> inode;
    std::getline(ls >> std::ws, path);
    Mapping m;
    m.start = std::strtoull(range.c_str(), nullptr, 16);
    m.offset = std::strtoull(offset.c_str(), nullptr, 16);
    unsigned major = 0, minor = 0;
    if (std::sscanf(dev.c_str(), "%x:%x", &major, &minor) == 2) m.dev = makedev(major, minor);
    m.ino = std::strtoull(inode.c_str(), nullptr, 10);
    m.path = path;
    maps.push_back(std::move(m));
  }
  return maps;
}

// The runtime's address and the version in a process, from whichever of its
// files holds `_PyRuntime`.
struct Runtime {
  uint64_t runtime = 0;
  uint64_t version_hex = 0;
};

Result<Runtime> FindRuntime(pid_t pid, Memory& mem) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::vector<std::string> candidates = {proc + "/exe"};
  std::vector<Mapping> maps = ReadMaps(pid);
  if (maps.empty()) return Status::NotFound("process " + std::to_string(pid) + " is gone");
  for (const auto& m : maps) {
    auto slash = m.path.rfind('/');
    std::string base = slash == std::string::npos ? m.path : m.path.substr(slash + 1);
    if (base.rfind("libpython3", 0) == 0 && m.offset == 0) {
      candidates.push_back(proc + "/root" + m.path);
    }
  }
  for (const auto& path : candidates) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      if (errno == EACCES || errno == EPERM) {
        return Status::PermissionDenied("cannot read process " + std::to_string(pid) +
                                        "'s files: " + std::strerror(errno));
      }
      continue;
    }
    auto syms = ReadElfSymbols(path);
    if (!syms) continue;
    uint64_t bias = 0;
    if (syms->dynamic) {
      bool found = false;
      for (const auto& m : maps) {
        if (m.ino == st.st_ino && m.dev == st.st_dev && m.offset == 0) {
          bias = m.start - syms->first_load_page;
          found = true;
          break;
        }
      }
      if (!found) continue;
    }
    Runtime rt;
    rt.runtime = syms->runtime + bias;
    if (!mem.U64(syms->version + bias, &rt.version_hex)) {
      int err = mem.last_errno();
      if (err == EPERM) {
        return Status::PermissionDenied("cannot read the memory of process " + std::to_string(pid) +
                                        " (not ours, or ptrace is barred)");
      }
      if (err == ESRCH) return Status::NotFound("process " + std::to_string(pid) + " is gone");
      continue;
    }
    return rt;
  }
  return Status::Unsupported("process " + std::to_string(pid) +
                             " is not a Python whose runtime can be found (no _PyRuntime symbol "
                             "in its executable or a libpython3 it maps)");
}

std::string VersionString(uint64_t hex) {
  return std::to_string((hex >> 24) & 0xff) + "." + std::to_string((hex >> 16) & 0xff) + "." +
         std::to_string((hex >> 8) & 0xff);
}

// The layout a 3.13 or later interpreter publishes at the start of its
// _PyRuntime, read at the indices `i` of its minor version.
Result<Layout> LayoutFromDebugOffsets(const Runtime& rt, Memory& mem, pid_t pid,
                                      const DebugIndex& i) {
  const std::string python =
      "process " + std::to_string(pid) + ": Python " + VersionString(rt.version_hex);
  uint64_t d[kMaxDebugCount];
  if (!mem.Read(rt.runtime, d, i.count * sizeof(uint64_t))) {
    return Status::NotFound("process " + std::to_string(pid) + " is gone");
  }
  if (std::memcmp(d, "xdebugpy", 8) != 0 || d[1] != rt.version_hex) {
    return Status::Unsupported(python +
                               "'s _PyRuntime does not begin with its debug offsets (cookie "
                               "\"xdebugpy\" and its version)");
  }
  if (d[kDebugFreeThreaded] != 0) {
    return Status::Unsupported(python +
                               " is a free-threaded build, whose stacks this reader cannot read");
  }
  // The groups' order is checked by fields whose values every 64-bit build
  // shares.
  if (d[i.pyobject_size] != 16 || d[i.ob_type] != 8 || d[i.type_name] != 24) {
    return Status::Unsupported(python +
                               "'s debug offsets are not laid out as this reader "
                               "expects of its minor version");
  }
  Layout l;
  l.runtime_interpreters_head = d[i.interpreters_head];
  l.interp_next = d[i.interp_next];
  l.interp_threads_head = d[i.interp_threads_head];
  l.thread_next = d[i.thread_next];
  l.thread_current_frame = d[i.thread_current_frame];
  l.thread_id = d[i.thread_id];
  l.thread_native_id = d[i.thread_native_id];
  l.frame_previous = d[i.frame_previous];
  l.frame_code = d[i.frame_executable];
  l.code_ref_tag_mask = i.executable_tag_mask;
  l.frame_instr = d[i.frame_instr_ptr];
  l.code_filename = d[i.code_filename];
  l.code_qualname = d[i.code_qualname];
  l.code_linetable = d[i.code_linetable];
  l.code_firstlineno = d[i.code_firstlineno];
  l.code_adaptive = d[i.code_adaptive];
  l.ob_type = d[i.ob_type];
  l.type_name = d[i.type_name];
  l.bytes_size = d[i.bytes_size];
  l.bytes_sval = d[i.bytes_sval];
  l.unicode_state = d[i.unicode_state];
  l.unicode_length = d[i.unicode_length];
  l.ascii_size = d[i.ascii_size];
  l.compact_size = d[i.ascii_size] + 16;  // + utf8_length, utf8
  return l;
}

Result<Layout> LayoutFor(const Runtime& rt, Memory& mem, pid_t pid) {
  const unsigned major = (rt.version_hex >> 24) & 0xff, minor = (rt.version_hex >> 16) & 0xff;
  if (major == 3 && minor == 11) return Layout311();
  if (major == 3 && minor == 12) return Layout312();
  if (major == 3 && minor == 13) return LayoutFromDebugOffsets(rt, mem, pid, kDebugIndex313);
  if (major == 3 && minor == 14) return LayoutFromDebugOffsets(rt, mem, pid, kDebugIndex314);
  return Status::Unsupported("process " + std::to_string(pid) + " runs Python " +
                             VersionString(rt.version_hex) +
                             ", whose stacks this reader cannot read (it knows 3.11 to 3.14)");
}

void AppendUtf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

class Walker {
 public:
  Walker(Memory& mem, const Layout& l) : mem_(mem), l_(l) {}

  // A str object's text as UTF-8 (compact strings only, which is what code
  // objects hold), at most kMaxString characters.
  std::optional<std::string> Str(uint64_t obj) {
    uint64_t length = 0;
    uint32_t state = 0;
    if (!mem_.U64(obj + l_.unicode_length, &length) ||
        !mem_.Read(obj + l_.unicode_state, &state, sizeof state)) {
      return std::nullopt;
    }
    const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || (kind != 1 && kind != 2 && kind != 4)) return std::nullopt;
    length = std::min<uint64_t>(length, kMaxString);
    std::string raw(length * kind, '\0');
    if (!mem_.Read(obj + (ascii ? l_.ascii_size : l_.compact_size), raw.data(), raw.size())) {
      return std::nullopt;
    }
    if (ascii) return raw;
    std::string out;
    for (size_t i = 0; i < length; ++i) {
      uint32_t c = 0;
      std::memcpy(&c, raw.data() + i * kind, kind);
      AppendUtf8(out, c);
    }
    return out;
  }

  std::optional<std::string> Bytes(uint64_t obj) {
    uint64_t size = 0;
    if (!mem_.U64(obj + l_.bytes_size, &size) || size > kMaxLineTable) return std::nullopt;
    std::string out(size, '\0');
    if (!mem_.Read(obj + l_.bytes_sval, out.data(), out.size())) return std::nullopt;
    return out;
  }

  // Whether `obj` is a code object: its type's tp_name is "code".
  std::optional<bool> IsCode(uint64_t obj) {
    uint64_t type = 0, name = 0;
    if (!mem_.U64(obj + l_.ob_type, &type)) return std::nullopt;
    if (auto it = is_code_.find(type); it != is_code_.end()) return it->second;
    char text[5] = {};
    if (!mem_.U64(type + l_.type_name, &name) || !mem_.Read(name, text, sizeof text)) {
      return std::nullopt;
    }
    bool code = std::memcmp(text, "code", 5) == 0;
    is_code_[type] = code;
    return code;
  }

  // The frame of code object `code` whose instruction pointer is `instr`,
  // and whether that code is an interpreter shim rather than Python's;
  // false if it could not be read.
  bool Frame(uint64_t code, uint64_t instr, PyFrame* out, bool* shim) {
    auto cached = code_.find(code);
    if (cached == code_.end()) {
      uint64_t file = 0, qualname = 0, linetable = 0;
      int32_t first_line = 0;
      if (!mem_.U64(code + l_.code_filename, &file) ||
          !mem_.U64(code + l_.code_qualname, &qualname) ||
          !mem_.U64(code + l_.code_linetable, &linetable) ||
          !mem_.Read(code + l_.code_firstlineno, &first_line, sizeof first_line)) {
        return false;
      }
      auto f = Str(file);
      auto q = Str(qualname);
      auto t = Bytes(linetable);
      if (!f || !q || !t) return false;
      // Compiled Python code has a location for some instruction; a code
      // object without any is one of the interpreter's shims (3.13 and 3.14
      // finish a specialised class call in one named "__init__"), no frame
      // of the user's. Its table is then only entries of form 15, one byte
      // each (LineForOffset below).
      const bool shim = std::all_of(t->begin(), t->end(), [](char b) {
        return (static_cast<unsigned char>(b) & 0xf8) == 0xf8;
      });
      cached = code_.emplace(code, Code{*q, *f, *t, first_line, shim}).first;
    }
    const Code& c = cached->second;
    *shim = c.shim;
    out->function = c.qualname;
    out->file = c.file;
    const uint64_t start = code + l_.code_adaptive;
    out->line = instr >= start && instr - start < (1u << 30)
                    ? LineForOffset(c.linetable, c.first_line, static_cast<int>(instr - start))
                    : -1;
    return true;
  }

  // One thread's frames, innermost first.
  void Thread(uint64_t tstate, PyThreadStack* out) {
    uint64_t frame = 0;
    if (l_.has_cframe) {
      uint64_t cframe = 0;
      if (!mem_.U64(tstate + l_.thread_cframe, &cframe) ||
          (cframe != 0 && !mem_.U64(cframe + l_.cframe_current_frame, &frame))) {
        out->partial = true;
        return;
      }
    } else if (!mem_.U64(tstate + l_.thread_current_frame, &frame)) {
      out->partial = true;
      return;
    }
    for (int n = 0; frame != 0; ++n) {
      if (n == kMaxFrames) {
        out->partial = true;
        return;
      }
      uint64_t code = 0, instr = 0, previous = 0;
      if (!mem_.U64(frame + l_.frame_code, &code) || !mem_.U64(frame + l_.frame_instr, &instr) ||
          !mem_.U64(frame + l_.frame_previous, &previous)) {
        out->partial = true;
        return;
      }
      code &= ~l_.code_ref_tag_mask;
      char owner = 0;
      if (l_.has_owner && !mem_.Read(frame + l_.frame_owner, &owner, sizeof owner)) {
        out->partial = true;
        return;
      }
      auto is_code =
          code == 0 || owner == kFrameOwnedByCStack ? std::optional<bool>(false) : IsCode(code);
      if (!is_code) {
        out->partial = true;
        return;
      }
      if (*is_code) {
        PyFrame f;
        bool shim = false;
        if (!Frame(code, instr, &f, &shim)) {
          out->partial = true;
          return;
        }
        if (!shim) out->frames.push_back(std::move(f));
      }
      frame = previous;
    }
  }

 private:
  struct Code {
    std::string qualname, file, linetable;
    int first_line;
    bool shim;
  };
  Memory& mem_;
  const Layout& l_;
  std::unordered_map<uint64_t, bool> is_code_;
  std::unordered_map<uint64_t, Code> code_;
};

std::string ThreadName(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// One read of every thread; a Status only where nothing could be read.
Result<PyProcessStack> ReadOnce(pid_t pid, Memory& mem, const Runtime& rt, const Layout& l) {
  PyProcessStack out;
  out.pid = pid;
  out.version = VersionString(rt.version_hex);
  Walker walker(mem, l);
  uint64_t interp = 0;
  if (!mem.U64(rt.runtime + l.runtime_interpreters_head, &interp)) {
    return Status::NotFound("process " + std::to_string(pid) + " is gone");
  }
  if (interp == 0) return out;  // not started yet, or finalized
  int threads = 0;
  for (int i = 0; interp != 0 && i < kMaxInterpreters; ++i) {
    uint64_t tstate = 0;
    if (!mem.U64(interp + l.interp_threads_head, &tstate)) break;
    std::vector<PyThreadStack> in_interp;
    for (; tstate != 0 && threads < kMaxThreads; ++threads) {
      PyThreadStack t;
      uint64_t native = 0;
      if (!mem.U64(tstate + l.thread_id, &t.thread_id) ||
          !mem.U64(tstate + l.thread_native_id, &native)) {
        break;
      }
      t.native_id = static_cast<pid_t>(native);
      t.name = ThreadName(pid, t.native_id);
      walker.Thread(tstate, &t);
      in_interp.push_back(std::move(t));
      if (!mem.U64(tstate + l.thread_next, &tstate)) break;
    }
    // Newest first in the list: the main thread, the oldest, goes first.
    out.threads.insert(out.threads.end(), in_interp.rbegin(), in_interp.rend());
    if (!mem.U64(interp + l.interp_next, &interp)) break;
  }
  return out;
}

bool AnyPartial(const PyProcessStack& s) {
  return std::any_of(s.threads.begin(), s.threads.end(),
                     [](const PyThreadStack& t) { return t.partial; });
}

// One svarint/varint of the location table: 6 bits a byte, bit 6 the
// continuation.
bool ReadVarint(std::string_view t, size_t* pos, uint32_t* out) {
  uint32_t value = 0;
  for (int shift = 0; *pos < t.size() && shift < 32; shift += 6) {
    const auto b = static_cast<unsigned char>(t[(*pos)++]);
    value |= static_cast<uint32_t>(b & 63) << shift;
    if (!(b & 64)) {
      *out = value;
      return true;
    }
  }
  return false;
}

bool ReadSvarint(std::string_view t, size_t* pos, int* out) {
  uint32_t u = 0;
  if (!ReadVarint(t, pos, &u)) return false;
  *out = (u & 1) ? -static_cast<int>(u >> 1) : static_cast<int>(u >> 1);
  return true;
}

}  // namespace

int LineForOffset(std::string_view table, int first_line, int byte_offset) {
  // Each entry: a first byte with bit 7 set, bits 3-6 its form and bits 0-2
  // the number of code units (2 bytes each) it covers less one; then the
  // form's data. Forms 0-9 (short) and 10-12 (one line, delta form-10) keep
  // or move the line with two column bytes; 13 moves it by an svarint and
  // has no columns; 14 (long) moves it by an svarint, then end line, column
  // and end column varints; 15 has no location.
  int line = first_line;
  int start = 0;
  size_t pos = 0;
  while (pos < table.size()) {
    const auto first = static_cast<unsigned char>(table[pos++]);
    if (!(first & 0x80)) return -1;
    const int form = (first >> 3) & 15;
    const int end = start + ((first & 7) + 1) * 2;
    int delta = 0;
    uint32_t skip = 0;
    bool ok = true;
    if (form == 14) {
      ok = ReadSvarint(table, &pos, &delta) && ReadVarint(table, &pos, &skip) &&
           ReadVarint(table, &pos, &skip) && ReadVarint(table, &pos, &skip);
    } else if (form == 13) {
      ok = ReadSvarint(table, &pos, &delta);
    } else if (form >= 10 && form <= 12) {
      delta = form - 10;
      pos += 2;
    } else if (form < 10) {
      pos += 1;
    }
    if (!ok || pos > table.size()) return -1;
    line += delta;
    if (byte_offset >= start && byte_offset < end) return form == 15 ? -1 : line;
    start = end;
  }
  return -1;
}

Result<PyProcessStack> ReadPythonStacks(pid_t pid) {
  Memory mem(pid);
  auto rt = FindRuntime(pid, mem);
  if (!rt.ok()) return rt.status();
  auto layout = LayoutFor(*rt, mem, pid);
  if (!layout.ok()) return layout.status();
  // A thread that moves between the reads of one walk leaves it partial;
  // another try usually catches it still.
  Result<PyProcessStack> best = Status::NotFound("process " + std::to_string(pid) + " is gone");
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto once = ReadOnce(pid, mem, *rt, *layout);
    if (once.ok()) {
      if (!AnyPartial(*once)) return once;
      best = std::move(once);
    } else if (!best.ok()) {
      best = once.status();
    }
  }
  return best;
}

struct PyStackReader::State {
  explicit State(pid_t p) : pid(p), mem(p) {}
  pid_t pid;
  Memory mem;
  Runtime runtime;
  Layout layout;
};

Result<PyStackReader> PyStackReader::Open(pid_t pid) {
  auto state = std::make_unique<State>(pid);
  auto rt = FindRuntime(pid, state->mem);
  if (!rt.ok()) return rt.status();
  auto layout = LayoutFor(*rt, state->mem, pid);
  if (!layout.ok()) return layout.status();
  state->runtime = *rt;
  state->layout = *layout;
  return PyStackReader(std::move(state));
}

Result<PyProcessStack> PyStackReader::Read() {
  return ReadOnce(state_->pid, state_->mem, state_->runtime, state_->layout);
}

PyStackReader::PyStackReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
PyStackReader::PyStackReader(PyStackReader&&) noexcept = default;
PyStackReader& PyStackReader::operator=(PyStackReader&&) noexcept = default;
PyStackReader::~PyStackReader() = default;

Result<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text))
    return Status::NotFound("process " + std::to_string(pid) + " is gone");
  auto unexpected = [pid] {
    return Status::Internal("/proc/" + std::to_string(pid) + "/stat: unexpected text");
  };
  // The command name in parentheses may hold spaces and parentheses: the
  // fields start after the last ')', with the state (field 3).
  auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return unexpected();
  std::istringstream fields(text.substr(close_paren + 1));
  ProcStat out;
  std::string skip;
  fields >> out.state >> out.ppid;
  // Fields 5-13 (pgrp ... cmajflt), then utime and stime (14, 15), then
  // 16-21 (cutime ... itrealvalue), then starttime (22).
  for (int i = 0; i < 9; ++i) fields >> skip;
  unsigned long long utime = 0, stime = 0;
  long long cutime = 0, cstime = 0;
  fields >> utime >> stime >> cutime >> cstime;
  for (int i = 0; i < 4; ++i) fields >> skip;
  fields >> out.start_time;
  if (!fields) return unexpected();
  const auto ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  out.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  out.reaped_children_cpu_seconds = static_cast<double>(std::max(0LL, cutime + cstime)) / ticks;
  return out;
}

}  // namespace trun::proc
