// libcurl, loaded when an HTTP client first needs it: the etcd backend's
// (rendezvous/etcd_client.h) and the kubernetes scheduler's
// (schedulers/kubernetes_client.h). It lives in net/, below both, so that
// neither module reaches into the other for it.
//
// trun does not link libcurl. Linked, libcurl and the 36 shared libraries it
// needs (TLS, Kerberos, LDAP, HTTP/2, ...) cost every trun process about
// 6 ms of dynamic linking and 6 MiB of resident memory at start, measured on
// a bare `int main() {}` (bench/RESULTS.md: launch, peak RSS), though only
// `--rdzv-backend etcd` and the kubernetes scheduler use them. dlopen()
// moves that cost to the runs that use them. Types and constants still come from <curl/curl.h>
// (Debian's libcurl4-openssl-dev at build time); at run time Debian's libcurl4 provides
// libcurl.so.4, whose ABI has been stable since 2006.
//
// Thread-safety: Libcurl() may be called from any thread; the library is
// loaded and curl_global_init() runs once. The functions are libcurl's, with
// its own rules (one handle per thread).
#pragma once

#include <curl/curl.h>

#include "common/status.h"

namespace trun::net {

// The part of libcurl's API that EtcdClient and KubeClient use.
struct CurlApi {
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_setopt) easy_setopt;
  decltype(&::curl_easy_getinfo) easy_getinfo;
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_multi_init) multi_init;
  decltype(&::curl_multi_cleanup) multi_cleanup;
  decltype(&::curl_multi_add_handle) multi_add_handle;
  decltype(&::curl_multi_remove_handle) multi_remove_handle;
  decltype(&::curl_multi_perform) multi_perform;
  decltype(&::curl_multi_poll) multi_poll;
  decltype(&::curl_multi_wakeup) multi_wakeup;
  decltype(&::curl_multi_info_read) multi_info_read;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
};

// libcurl, loaded and initialised; or why it cannot be (not installed, too
// old for curl_multi_poll/curl_multi_wakeup, which came in 7.66 and 7.68),
// naming the package to install. The answer is the same on every call.
Result<const CurlApi*> Libcurl();

}  // namespace trun::net
