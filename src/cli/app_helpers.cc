#include "cli/app_helpers.h"

#include <fmt/format.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include "proc/pump.h"

namespace trun::cli {

Result<OpenedApp> OpenApp(const std::string& handle) {
  auto h = specs::ParseAppHandle(handle);
  if (!h.ok()) return h.status();
  auto s = schedulers::CreateScheduler(h->scheduler, h->session);
  if (!s.ok()) return s.status();
  return OpenedApp{std::move(*s), *h};
}

Status FollowLogs(schedulers::Scheduler& s, const std::string& app_id,
                  const std::vector<std::pair<std::string, int>>& replicas,
                  const schedulers::LogOptions& options, int fd) {
  const bool color = ::isatty(fd);
  std::mutex mu;
  std::vector<Status> results(replicas.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replicas.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto& [role, id] = replicas[i];
      std::string prefix =
          color ? fmt::format("\033[32m{}/{}\033[0m ", role, id) : fmt::format("{}/{} ", role, id);
      results[i] = s.Log(app_id, role, id, options, [&](std::string_view line) {
        std::string out = prefix;
        out.append(line);
        out += '\n';
        std::lock_guard<std::mutex> lock(mu);
        // A closed reader (`trun log ... | head`) ends the following.
        return proc::WriteAll(fd, out).ok();
      });
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    if (!r.ok()) return r;
  }
  return Status::OK();
}

std::vector<std::pair<std::string, int>> ReplicasOf(const schedulers::DescribeAppResponse& d,
                                                    const std::string& role) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& rs : d.roles_statuses) {
    if (!role.empty() && rs.role != role) continue;
    for (const auto& r : rs.replicas) out.emplace_back(rs.role, r.id);
  }
  return out;
}

}  // namespace trun::cli
