#include "memory/ipc.h"

#include <atomic>
#include <map>
#include <mutex>

namespace tern {

namespace {

struct Opened {
  void* base;
  IpcCloser close;
  int users;
};

std::mutex gMu;
std::map<IpcHandle, Opened>& opened() {
  static auto* m = new std::map<IpcHandle, Opened>;  // never freed: conns release at exit
  return *m;
}

std::atomic<uint64_t> gStaged{0}, gIpc{0};

}  // namespace

void* ipcAcquire(const IpcHandle& h, const std::function<void*(std::string*)>& open,
                 IpcCloser close, std::string* why) {
  std::lock_guard<std::mutex> lk(gMu);
  auto it = opened().find(h);
  if (it != opened().end()) {
    ++it->second.users;
    return it->second.base;
  }
  void* base = open(why);
  if (base) opened().emplace(h, Opened{base, close, 1});
  return base;
}

void ipcRelease(const IpcHandle& h) {
  std::lock_guard<std::mutex> lk(gMu);
  auto it = opened().find(h);
  if (it == opened().end() || --it->second.users > 0) return;
  it->second.close(h, it->second.base);
  opened().erase(it);
}

DeviceTraffic deviceTraffic() {
  return DeviceTraffic{gStaged.load(std::memory_order_relaxed), gIpc.load(std::memory_order_relaxed)};
}
void countStaged(uint64_t bytes) { gStaged.fetch_add(bytes, std::memory_order_relaxed); }
void countIpc(uint64_t bytes) { gIpc.fetch_add(bytes, std::memory_order_relaxed); }

}  // namespace tern
