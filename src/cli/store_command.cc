#include "cli/store_command.h"

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <cstdio>

#include "common/exit_code.h"
#include "common/log.h"
#include "store/server.h"

namespace trun::cli {

int RunStoreCommand(const std::vector<std::string>& args) {
  CLI::App app{"trun store: a key-value store that speaks PyTorch's TCPStore protocol",
               "trun store"};
  store::ServerOptions options;
  options.port = 29500;
  app.add_option("--host", options.host, "Address to listen on (default: every address)");
  app.add_option("--port", options.port, "Port to listen on; 0 picks a free one (default 29500)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--max-key-bytes", options.limits.max_key_bytes, "Longest key accepted");
  app.add_option("--max-value-bytes", options.limits.max_value_bytes, "Longest value accepted");
  app.add_option("--max-keys-per-request", options.limits.max_keys_per_request,
                 "Most keys in one request");
  app.add_option("--max-buffered-bytes", options.limits.max_buffered_bytes,
                 "Most bytes one client may have buffered");
  std::string allow = "any";
  app.add_option("--allow", allow,
                 "Who may connect: 'any' (default), or addresses and CIDRs separated by ',' "
                 "(loopback and this host always may)");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitSuccess;
  } catch (const CLI::ParseError& e) {
    return ReportError(
        Status::InvalidArgument(fmt::format("store: {}; run 'trun store --help'", e.what())));
  }
  auto networks = store::ParseNetworks(allow);
  if (!networks.ok()) {
    return ReportError(Status::InvalidArgument(
        fmt::format("store: --allow {}: {}", allow, networks.status().message())));
  }
  store::RaiseOpenFileLimit();
  asio::io_context io(1);
  auto server = store::StoreServer::Start(io, options);
  if (!server.ok()) return ReportError(server.status());
  if (networks->has_value()) {
    store::Allowlist list;
    list.networks = std::move(**networks);
    list.widen_hint = "trun store --allow widens it";
    (*server)->SetAllowlist(std::move(list));
  }
  std::printf("trun store listening on %s:%d\n", options.host.empty() ? "*" : options.host.c_str(),
              (*server)->port());
  std::fflush(stdout);
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](std::error_code, int) { io.stop(); });
  io.run();
  return kExitSuccess;
}

}  // namespace trun::cli
