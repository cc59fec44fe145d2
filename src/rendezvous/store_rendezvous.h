// StoreRendezvous: the static and c10d backends, over trun's own store.
//
// One agent hosts the store and, beside it on its loop, the Coordinator
// (coordinator.h): static's node rank 0, or under c10d the agent on the
// endpoint's host that binds its port first (torchrun's is_host rule). Every
// agent, the host too, is a client: a "main" thread joins and waits for its
// rounds and their ends (blocking WAITs, so nothing polls), a "control"
// thread sends heartbeats and the node's messages. If the store's host dies,
// c10d survivors that own the endpoint's address race to bind it, the winner
// hosts a fresh store and coordinator, and everyone joins again carrying the
// round number and the spent restarts; static has nobody to take over and
// says which host it lost.
//
// Thread-safety: as Rendezvous; the two threads talk to the loop only by
// posting to it.
#pragma once

#include <asio.hpp>
#include <memory>

#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

std::unique_ptr<Rendezvous> MakeStoreRendezvous(asio::io_context& io, Options options);

}  // namespace trun::rendezvous
