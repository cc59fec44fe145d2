// StoreMedium: the static and c10d backends' medium, trun's own store.
//
// One agent hosts the store and, beside it on its loop, the coordinator:
// static's node rank 0, or under c10d an agent on the endpoint's host that
// binds its port first (torchrun's is_host rule). The store tells the
// coordinator of each change as it applies it and of each closed
// connection, so a killed agent is noticed at once; a node cut off from the
// network by its missing heartbeats. After the host's loss, c10d agents that
// own the endpoint's address may take it over; static has nobody to.
//
// Thread-safety: as Medium.
#pragma once

#include <asio.hpp>
#include <memory>

#include "rendezvous/medium.h"
#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

std::unique_ptr<Medium> MakeStoreMedium(asio::io_context& io, const Options& options);

}  // namespace trun::rendezvous
