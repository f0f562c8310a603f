#!/usr/bin/env python3
"""Writes the hwloc 2.x XML topologies the topology tests load.

The files are committed; this script documents how they were made and remakes
them (python3 tests/topologies/generate.py).  Each describes a host that this
machine is not, so the placement decisions can be checked against a known
answer:

  two_socket_8gpu_4nic.xml  2 packages x 8 cores x 2 PUs (core c has PUs c and
                            c+16), one NUMA node each; each package has two
                            PCIe switches, each switch 2 NVIDIA GPUs + 1
                            Mellanox NIC (ib<k> / mlx5_<k>).
  two_socket_2nic.xml       the same CPUs, no GPU, one NIC per package
                            (eth0 on package 0, eth1 on package 1).
  no_devices.xml            1 package, 4 cores, no GPU, no NIC.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0

    def gpi(self):
        self.gp += 1
        return self.gp

    def add(self, depth, text):
        self.lines.append("  " * depth + text)


def mask(pus):
    v = 0
    for p in pus:
        v |= 1 << p
    return "0x%08x" % v


def sets(pus, nodes):
    return ('cpuset="{0}" complete_cpuset="{0}" nodeset="{1}" complete_nodeset="{1}"'
            .format(mask(pus), mask(nodes)))


def pci_type(cls, vendor, device):
    return "%04x [%04x:%04x] [%04x:%04x] 00" % (cls, vendor, device, vendor, device)


def host(packages, cores_per_package, smt, switches):
    """switches[p] = list of switches of package p; a switch = list of
    ("gpu", k) / ("nic", k, netdev, rdma) endpoints."""
    w = Writer()
    total_cores = packages * cores_per_package
    all_pus = [c + s * total_cores for c in range(total_cores) for s in range(smt)]
    nodes = list(range(packages))
    w.add(0, '<?xml version="1.0" encoding="UTF-8"?>')
    w.add(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    w.add(0, '<topology version="2.0">')
    w.add(1, '<object type="Machine" os_index="0" {} allowed_cpuset="{}" allowed_nodeset="{}" gp_index="{}">'
          .format(sets(all_pus, nodes), mask(all_pus), mask(nodes), w.gpi()))
    bus = 0x10
    for p in range(packages):
        cores = range(p * cores_per_package, (p + 1) * cores_per_package)
        pus = [c + s * total_cores for c in cores for s in range(smt)]
        w.add(2, '<object type="Package" os_index="{}" {} gp_index="{}">'.format(p, sets(pus, [p]), w.gpi()))
        w.add(3, '<object type="NUMANode" os_index="{}" {} gp_index="{}" local_memory="68719476736"/>'
              .format(p, sets(pus, [p]), w.gpi()))
        for c in cores:
            cpus = [c + s * total_cores for s in range(smt)]
            w.add(3, '<object type="Core" os_index="{}" {} gp_index="{}">'.format(c, sets(cpus, [p]), w.gpi()))
            for pu in cpus:
                w.add(4, '<object type="PU" os_index="{}" {} gp_index="{}"/>'.format(pu, sets([pu], [p]), w.gpi()))
            w.add(3, '</object>')
        for sw in switches[p]:
            first, last = bus, bus + len(sw)
            w.add(3, '<object type="Bridge" gp_index="{}" bridge_type="0-1" depth="0" bridge_pci="0000:[{:02x}-{:02x}]">'
                  .format(w.gpi(), first, last))
            w.add(4, '<object type="Bridge" gp_index="{}" pci_busid="0000:{:02x}:00.0" pci_type="{}" '
                  'pci_link_speed="31.507692" bridge_type="1-1" depth="1" bridge_pci="0000:[{:02x}-{:02x}]">'
                  .format(w.gpi(), first, pci_type(0x0604, 0x10b5, 0x9797), first + 1, last))
            for i, ep in enumerate(sw):
                busid = "0000:{:02x}:00.0".format(first + 1 + i)
                if ep[0] == "gpu":
                    w.add(5, '<object type="PCIDev" gp_index="{}" pci_busid="{}" pci_type="{}" pci_link_speed="31.507692">'
                          .format(w.gpi(), busid, pci_type(0x0302, 0x10de, 0x2330)))
                    w.add(6, '<object type="OSDev" gp_index="{}" name="cuda{}" subtype="CUDA" osdev_type="5"/>'
                          .format(w.gpi(), ep[1]))
                else:
                    cls, dev = (0x0207, 0x101b) if ep[3] else (0x0200, 0x1017)
                    w.add(5, '<object type="PCIDev" gp_index="{}" pci_busid="{}" pci_type="{}" pci_link_speed="31.507692">'
                          .format(w.gpi(), busid, pci_type(cls, 0x15b3, dev)))
                    w.add(6, '<object type="OSDev" gp_index="{}" name="{}" osdev_type="2"/>'.format(w.gpi(), ep[2]))
                    if ep[3]:
                        w.add(6, '<object type="OSDev" gp_index="{}" name="{}" subtype="OpenFabrics" osdev_type="3"/>'
                              .format(w.gpi(), ep[3]))
                    w.add(5, '</object>')
                    continue
                w.add(5, '</object>')
            w.add(4, '</object>')
            w.add(3, '</object>')
            bus = last + 0x10
        w.add(2, '</object>')
    w.add(1, '</object>')
    w.add(0, '</topology>')
    return "\n".join(w.lines) + "\n"


def main():
    gpu_nic = [[[("gpu", 4 * p + 2 * s), ("gpu", 4 * p + 2 * s + 1), ("nic", 2 * p + s, "ib%d" % (2 * p + s),
                  "mlx5_%d" % (2 * p + s))] for s in range(2)] for p in range(2)]
    files = {
        "two_socket_8gpu_4nic.xml": host(2, 8, 2, gpu_nic),
        "two_socket_2nic.xml": host(2, 8, 2, [[[("nic", 0, "eth0", None)]], [[("nic", 1, "eth1", None)]]]),
        "no_devices.xml": host(1, 4, 1, [[]]),
    }
    for name, text in files.items():
        with open(os.path.join(HERE, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
