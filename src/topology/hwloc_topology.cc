// Topology discovery with hwloc 2.x: cores with their package and NUMA node,
// and the GPUs and NICs of the PCI tree with their CPU locality.
#include <hwloc.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "topology/topology.h"

namespace tern {

namespace {

PuSet toPus(hwloc_const_bitmap_t b) {
  PuSet s;
  if (!b) return s;
  int i;
  hwloc_bitmap_foreach_begin(i, b) s.push_back(i);
  hwloc_bitmap_foreach_end();
  return s;
}

int packageOf(hwloc_topology_t topo, hwloc_obj_t o) {
  hwloc_obj_t p = o->type == HWLOC_OBJ_PACKAGE ? o : hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o);
  return p ? static_cast<int>(p->logical_index) : -1;
}

int numaOf(hwloc_obj_t o) {
  return o->nodeset && !hwloc_bitmap_iszero(o->nodeset) ? hwloc_bitmap_first(o->nodeset) : -1;
}

bool isNvidia(hwloc_obj_t pci) { return pci->attr->pcidev.vendor_id == 0x10de; }

// A PCI function becomes a GPU when it is a display controller that a GPU or
// co-processor OS device sits on (or any NVIDIA display function: XML files
// written without OS devices still count), and a NIC when it is a network
// controller with a netdev or a verbs device.
void classify(hwloc_topology_t topo, hwloc_obj_t pci, Topology* t) {
  unsigned cls = pci->attr->pcidev.class_id >> 8;
  TopoDevice d;
  char bus[32];
  snprintf(bus, sizeof bus, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain,
           pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  d.busid = bus;
  bool gpuDev = false;
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
    switch (c->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_NETWORK: d.name = c->name; break;
      case HWLOC_OBJ_OSDEV_OPENFABRICS: d.rdmaName = c->name; break;
      case HWLOC_OBJ_OSDEV_GPU:
      case HWLOC_OBJ_OSDEV_COPROC:
        gpuDev = true;
        if (d.name.empty() || !strncmp(c->name, "cuda", 4)) d.name = c->name;
        break;
      default: break;
    }
  }
  hwloc_obj_t cpuSide = hwloc_get_non_io_ancestor_obj(topo, pci);
  d.localPus = toPus(cpuSide ? cpuSide->cpuset : nullptr);
  d.package = cpuSide ? packageOf(topo, cpuSide) : -1;
  d.numa = cpuSide ? numaOf(cpuSide) : -1;
  for (hwloc_obj_t o = pci; o; o = o->parent) d.path.insert(d.path.begin(), o->gp_index);
  if (cls == 0x03 && (gpuDev || isNvidia(pci))) t->gpus.push_back(std::move(d));
  else if (cls == 0x02 && (!d.name.empty() || !d.rdmaName.empty())) t->nics.push_back(std::move(d));
}

ternResult_t discover(const std::string& xmlPath, Topology* t) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return setError(ternSystemError, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!xmlPath.empty() && hwloc_topology_set_xml(topo, xmlPath.c_str()) != 0) {
    hwloc_topology_destroy(topo);
    return setError(ternInvalidArgument, "hwloc cannot read the topology XML '" + xmlPath + "'");
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return setError(ternSystemError, "hwloc could not load the topology" +
                                         (xmlPath.empty() ? std::string() : " from '" + xmlPath + "'"));
  }
  t->source = xmlPath.empty() ? "this host" : xmlPath;
  t->packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t->numaNodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c));)
    t->cores.push_back({static_cast<int>(c->os_index), packageOf(topo, c), numaOf(c), toPus(c->cpuset)});
  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_pcidev(topo, p));) classify(topo, p, t);

  hwloc_bitmap_t allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
  if (xmlPath.empty()) {  // the process's binding narrows what it may use
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(bound))
      hwloc_bitmap_and(allowed, allowed, bound);
    hwloc_bitmap_free(bound);
  }
  t->allowedPus = toPus(allowed);
  hwloc_bitmap_free(allowed);
  hwloc_topology_destroy(topo);
  return ternSuccess;
}

}  // namespace

ternResult_t loadTopology(const std::string& xmlPath, Topology* out) {
  if (!xmlPath.empty()) return discover(xmlPath, out);
  // The host does not change under a process; its cpuset rarely does, and a
  // communicator made after a rebinding still sees the first reading.
  static std::mutex mu;
  static Topology cached;
  static bool have = false;
  std::lock_guard<std::mutex> lk(mu);
  if (!have) {
    TERN_CHECK(discover("", &cached));
    have = true;
  }
  *out = cached;
  return ternSuccess;
}

}  // namespace tern
