#include "cli/store_command.h"

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <cstdio>

#include "common/exit_code.h"
#include "common/log.h"
#include "store/process_limits.h"
#include "store/relay.h"
#include "store/server.h"
#include "store/server_thread.h"

namespace trun::cli {

namespace {

void PrintListening(const std::string& host, int port) {
  std::printf("trun store listening on %s:%d\n", host.empty() ? "*" : host.c_str(), port);
  std::fflush(stdout);
}

void RunUntilSignal(asio::io_context& io) {
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](std::error_code, int) { io.stop(); });
  io.run();
}

// --relay: the store on a thread of its own, its clients served by a relay
// (store/relay.h) on this one.
int RunStoreBehindRelay(store::ServerOptions options) {
  std::string host = options.host.empty() ? "127.0.0.1" : options.host;
  int port = options.port;
  options.host = "127.0.0.1";
  options.port = 0;
  auto server = store::StoreServerThread::Start(options);
  if (!server.ok()) return ReportError(server.status());
  asio::io_context io(1);
  store::RelayOptions relay_options;
  relay_options.host = host;
  relay_options.port = port;
  relay_options.store_host = "127.0.0.1";
  relay_options.store_port = (*server)->port();
  relay_options.limits = options.limits;
  auto relay = store::Relay::Start(io, relay_options);
  if (!relay.ok()) return ReportError(relay.status());
  PrintListening(host, (*relay)->port());
  RunUntilSignal(io);
  return kExitSuccess;
}

}  // namespace

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
  bool relay = false;
  app.add_flag("--relay", relay,
               "Serve clients through a relay in front of the store, over one connection, as "
               "'trun run --store-relay on' serves a node's workers (the address printed is the "
               "relay's; it listens on --host, 127.0.0.1 by default)");
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
  if (relay && networks->has_value()) {
    return ReportError(Status::InvalidArgument(
        "store: --relay with --allow: the relay serves every client that reaches --host; leave "
        "out --allow, or listen on 127.0.0.1"));
  }
  if (relay) return RunStoreBehindRelay(std::move(options));
  asio::io_context io(1);
  auto server = store::StoreServer::Start(io, options);
  if (!server.ok()) return ReportError(server.status());
  if (networks->has_value()) {
    store::Allowlist list;
    list.networks = std::move(**networks);
    list.widen_hint = "trun store --allow widens it";
    (*server)->SetAllowlist(std::move(list));
  }
  PrintListening(options.host, (*server)->port());
  RunUntilSignal(io);
  return kExitSuccess;
}

}  // namespace trun::cli
