// Participant: a node's side of a store-like rendezvous, over any Medium
// (medium.h): the static and c10d backends over trun's store, etcd over
// etcd. A "main" thread joins and waits for its rounds and their ends
// (blocking waits on the medium, so nothing polls); a "control" thread sends
// heartbeats and the node's messages (failed, done, left). When the
// coordinator's host is lost, the node stops its workers, tries to take the
// host's place if the medium lets it, and joins again carrying the round
// number, the spent restarts and the last round's nodes.
//
// Its deadlines (join_timeout, the host's heartbeat_timeout, and those it
// hands the medium's Connect) are read from `now`: the steady clock, except
// in unit tests, which move a virtual one (participant_test.cc). The waits
// between heartbeats stay real.
//
// Thread-safety: as Rendezvous; the two threads talk to the agent's loop
// only by posting to it. `now` is called from both threads.
#pragma once

#include <asio.hpp>
#include <functional>
#include <memory>

#include "rendezvous/medium.h"
#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

using ClockNow = std::function<Clock::time_point()>;

std::unique_ptr<Rendezvous> MakeParticipant(asio::io_context& io, Options options,
                                            std::unique_ptr<Medium> medium,
                                            ClockNow now = &Clock::now);

}  // namespace trun::rendezvous
