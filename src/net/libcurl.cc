#include "net/libcurl.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace trun::net {
namespace {

Result<CurlApi> Load() {
  // Never dlclose()d: the functions stay in use until the process ends.
  void* lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return Status::IOError(
        fmt::format("the etcd backend and the kubernetes scheduler need libcurl, which could not "
                    "be loaded ({}); install it "
                    "(Debian: apt-get install libcurl4)",
                    why ? why : "libcurl.so.4 not found"));
  }
  CurlApi api{};
  std::string missing;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) missing += missing.empty() ? name : fmt::format(", {}", name);
  };
  get(api.easy_init, "curl_easy_init");
  get(api.easy_cleanup, "curl_easy_cleanup");
  get(api.easy_setopt, "curl_easy_setopt");
  get(api.easy_getinfo, "curl_easy_getinfo");
  get(api.easy_strerror, "curl_easy_strerror");
  get(api.multi_init, "curl_multi_init");
  get(api.multi_cleanup, "curl_multi_cleanup");
  get(api.multi_add_handle, "curl_multi_add_handle");
  get(api.multi_remove_handle, "curl_multi_remove_handle");
  get(api.multi_perform, "curl_multi_perform");
  get(api.multi_poll, "curl_multi_poll");
  get(api.multi_wakeup, "curl_multi_wakeup");
  get(api.multi_info_read, "curl_multi_info_read");
  get(api.slist_append, "curl_slist_append");
  get(api.slist_free_all, "curl_slist_free_all");
  decltype(&::curl_global_init) global_init = nullptr;
  get(global_init, "curl_global_init");
  if (!missing.empty()) {
    return Status::IOError(
        fmt::format("the etcd backend and the kubernetes scheduler need libcurl 7.68 or later; the "
                    "installed libcurl.so.4 lacks {} "
                    "(Debian: apt-get install libcurl4)",
                    missing));
  }
  if (CURLcode c = global_init(CURL_GLOBAL_DEFAULT); c != CURLE_OK) {
    return Status::IOError(fmt::format("libcurl could not start: {}", api.easy_strerror(c)));
  }
  return api;
}

}  // namespace

Result<const CurlApi*> Libcurl() {
  // A function-local static: loaded once, thread-safe by the language.
  static const Result<CurlApi> api = Load();
  if (!api.ok()) return api.status();
  return &*api;
}

}  // namespace trun::net
