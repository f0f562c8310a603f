/* audit_probe MODE SHIM: dlopen("libnccl.so.2") and report which file came.
 *   shim: it must be SHIM (LD_AUDIT redirected it even though a real NCCL is
 *         first on LD_LIBRARY_PATH), no other libnccl may be loaded, and its
 *         ncclGetVersion must be the shim's.
 *   real: it must not be SHIM (the control: without LD_AUDIT the library
 *         path finds the real NCCL, so the first case proves something). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char shimReal[PATH_MAX];
static int others;

static int countOtherNccl(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  char real[PATH_MAX];
  const char* base = strrchr(info->dlpi_name, '/');
  if (!base || strncmp(base + 1, "libnccl.so", 10) != 0) return 0;
  if (!realpath(info->dlpi_name, real) || strcmp(real, shimReal) != 0) {
    fprintf(stderr, "also loaded: %s\n", info->dlpi_name);
    ++others;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3 || !realpath(argv[2], shimReal)) {
    fprintf(stderr, "usage: audit_probe shim|real PATH_OF_SHIM\n");
    return 2;
  }
  int wantShim = strcmp(argv[1], "shim") == 0;
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  struct link_map* lm = NULL;
  char got[PATH_MAX];
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) || !realpath(lm->l_name, got)) return 1;
  int isShim = strcmp(got, shimReal) == 0;
  printf("libnccl.so.2 -> %s (%s)\n", got, isShim ? "tern's shim" : "not the shim");
  int (*getVersion)(int*) = (int (*)(int*))dlsym(h, "ncclGetVersion");
  int version = 0;
  if (getVersion) getVersion(&version);
  printf("ncclGetVersion: %d\n", version);
  dl_iterate_phdr(countOtherNccl, NULL);
  int ok = wantShim ? (isShim && others == 0 && version == 22300) : !isShim;
  printf("%d passed, %d failed\n", ok, !ok);
  return ok ? 0 : 1;
}
