// .trunconfig: TorchX's .torchxconfig under trun's name. An INI file:
//
//   [local]                 run options of a scheduler (`trun runopts local`)
//   log_dir = /scratch/logs
//
//   [component:dist.ddp]    defaults for a component's arguments
//   j = 2x4
//
//   [cli:run]               defaults of `trun run`: component, scheduler
//   scheduler = local
//
// Where: $TRUNCONFIG names the only file when it is set (set and empty: no
// file at all; set to a missing file: an error). Otherwise
// $HOME/.trunconfig, then ./.trunconfig; a value from an earlier file wins,
// and the command line wins over both.
//
// The syntax is Python's configparser's, as TorchX reads it: `key = value`
// or `key: value` (the first "=" or ":" splits), keys case-sensitive, values
// trimmed, an indented line continues the value above it, whole-line
// comments with "#" or ";", [DEFAULT] values seen in every section, a
// section or a key twice in one file is an error.
//
// Thread-safety: values; Load() reads the environment and the file system.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "specs/runopts.h"

namespace trun::specs {

inline constexpr std::string_view kConfigFile = ".trunconfig";

struct IniSection {
  std::string name;
  std::vector<std::pair<std::string, std::string>> entries;
};

// `file` names the text in messages ("~/.trunconfig, line 3: ...").
Result<std::vector<IniSection>> ParseIni(std::string_view text, std::string_view file);
std::string FormatIni(const std::vector<IniSection>& sections);

class TrunConfig {
 public:
  // The files described above, read and parsed.
  static Result<TrunConfig> Load();
  // These files, in order of precedence; a missing one is skipped.
  static Result<TrunConfig> FromFiles(const std::vector<std::string>& paths);

  // The files that were read, in order of precedence.
  std::vector<std::string> files() const;

  // Every key of [name] (and [DEFAULT]), the first file's value winning.
  std::map<std::string, std::string> Section(const std::string& name) const;
  std::optional<std::string> Get(const std::string& section, const std::string& key) const;

  // Adds the [scheduler] section's options to `cfg`, cast to their types;
  // keys already in `cfg` are kept, "None" means None. A key that is not an
  // option of the scheduler is a warning (config files outlive schedulers'
  // options); a value that does not cast is an error naming the file.
  Status ApplySchedulerSection(const std::string& scheduler, const RunOpts& opts, Cfg& cfg) const;

 private:
  struct File {
    std::string path;
    std::vector<IniSection> sections;
  };
  std::vector<File> files_;
};

// A [scheduler] section for `trun configure`: required options get a
// "#FIXME:(type) help" placeholder; optional ones their default, unless
// `required_only`.
IniSection RunOptsSection(const std::string& scheduler, const RunOpts& opts, bool required_only);

}  // namespace trun::specs
