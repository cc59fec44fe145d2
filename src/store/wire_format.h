// The TCPStore wire format: every constant of both protocol generations, in
// one place. docs/store-protocol.md gives the byte grammar these implement.
//
// Framing: one opcode byte, then the arguments, no length and no terminator.
// Integers are in host byte order (little-endian on every platform torch
// ships for); a string or byte vector is a u64 length and then the bytes.
//
// Thread-safety: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trun::store {

// torch 1.10 to 2.1 (v1) and later (v2) number their opcodes differently.
// A connection is v2 if its first message is VALIDATE: byte 0x00 followed by
// this magic; otherwise it is v1. (A v1 SET also starts with 0x00, but then a
// u64 key length whose low four bytes would have to equal the magic: a key
// of more than 1 GiB, far over any limit.)
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

namespace v1 {
inline constexpr uint8_t kSet = 0;
inline constexpr uint8_t kCompareSet = 1;
inline constexpr uint8_t kGet = 2;
inline constexpr uint8_t kAdd = 3;
inline constexpr uint8_t kCheck = 4;
inline constexpr uint8_t kWait = 5;
inline constexpr uint8_t kGetNumKeys = 6;
inline constexpr uint8_t kWatchKey = 7;
inline constexpr uint8_t kDeleteKey = 8;
// torch 2.0/2.1 only.
inline constexpr uint8_t kAppend = 9;
inline constexpr uint8_t kMultiGet = 10;
inline constexpr uint8_t kMultiSet = 11;
inline constexpr uint8_t kCancelWait = 12;
}  // namespace v1

namespace v2 {
inline constexpr uint8_t kValidate = 0;
inline constexpr uint8_t kSet = 1;
inline constexpr uint8_t kCompareSet = 2;
inline constexpr uint8_t kGet = 3;
inline constexpr uint8_t kAdd = 4;
inline constexpr uint8_t kCheck = 5;
inline constexpr uint8_t kWait = 6;
inline constexpr uint8_t kGetNumKeys = 7;
inline constexpr uint8_t kDeleteKey = 8;
inline constexpr uint8_t kAppend = 9;
inline constexpr uint8_t kMultiGet = 10;
inline constexpr uint8_t kMultiSet = 11;
inline constexpr uint8_t kCancelWait = 12;
inline constexpr uint8_t kPing = 13;
inline constexpr uint8_t kQueuePush = 14;
inline constexpr uint8_t kQueuePop = 15;
inline constexpr uint8_t kQueueLen = 16;
// Later 2.x releases (torch 2.14's client sends both; found on the wire).
inline constexpr uint8_t kListKeys = 17;
inline constexpr uint8_t kBarrier = 18;
}  // namespace v2

// Replies of one byte. (QUEUE_POP's reply is an i64, the queue's length
// before the pop, then the item as bytes when that length is not zero;
// LIST_KEYS' is an i64 count, then each key as bytes. BARRIER answers
// kWaitStopWaiting, as WAIT does, once its count reaches the world size.)
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kWaitStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;

// v1 watch events, sent on a client's callback connection.
inline constexpr uint8_t kWatchKeyUpdated = 0;
inline constexpr uint8_t kWatchKeyCreated = 1;
inline constexpr uint8_t kWatchKeyDeleted = 2;
inline constexpr uint8_t kWatchCallbackRegistered = 3;
inline constexpr uint8_t kWatchKeyAppended = 4;

// The key torch's TCPStore clients ADD 1 to when they connect with a world
// size (waitForWorkers). Not prefixed with '/', unlike every other key.
inline constexpr const char* kInitKey = "init/";

// Default limits, as torch's libuv server. A client over any of them is
// dropped.
inline constexpr size_t kDefaultMaxKeyBytes = 8 * 1024;
inline constexpr size_t kDefaultMaxValueBytes = 8 * 1024 * 1024;
inline constexpr size_t kDefaultMaxKeysPerRequest = 131072;
// trun's own, not torch's: what one connection may make the server hold,
// counted separately for its input (unparsed bytes plus the decoded part of
// the message in progress) and for its replies not yet sent.
inline constexpr size_t kDefaultMaxBufferedBytes = 64 * 1024 * 1024;

}  // namespace trun::store
