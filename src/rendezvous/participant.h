// Participant: a node's side of a store-like rendezvous, over any Medium
// (medium.h): the static and c10d backends over trun's store, etcd over
// etcd. A "main" thread joins and waits for its rounds and their ends
// (blocking waits on the medium, so nothing polls); a "control" thread sends
// heartbeats and the node's messages (failed, done, left). When the
// coordinator's host is lost, the node stops its workers, tries to take the
// host's place if the medium lets it, and joins again carrying the round
// number, the spent restarts and the last round's nodes.
//
// Thread-safety: as Rendezvous; the two threads talk to the agent's loop
// only by posting to it.
#pragma once

#include <asio.hpp>
#include <memory>

#include "rendezvous/medium.h"
#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

std::unique_ptr<Rendezvous> MakeParticipant(asio::io_context& io, Options options,
                                            std::unique_ptr<Medium> medium);

}  // namespace trun::rendezvous
