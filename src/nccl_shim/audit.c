/* libtern_nccl_audit.so: an rtld-audit library (LD_AUDIT) that answers every
 * search for libnccl.so.2 (or libnccl.so) with tern's shim, so a real NCCL on
 * the library path is never loaded beside it.  With LD_PRELOAD instead, a real
 * libnccl that the program also finds would silently supply every symbol the
 * shim lacks, hiding gaps; here there is no second library to fall back on.
 *
 * The shim is libnccl.so.2 in this library's own directory, or the file that
 * TERN_NCCL_SHIM names.  TERN_NCCL_SHIM_LOG=1 reports each redirection. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char shimPath[PATH_MAX];

unsigned int la_version(unsigned int version) {
  (void)version;
  return LAV_CURRENT;
}

/* The shim's path: TERN_NCCL_SHIM, else beside this audit library. */
static const char* shim(void) {
  if (shimPath[0]) return shimPath;
  const char* env = getenv("TERN_NCCL_SHIM");
  if (env && *env) {
    snprintf(shimPath, sizeof shimPath, "%s", env);
    return shimPath;
  }
  Dl_info info;
  if (!dladdr((void*)&la_version, &info) || !info.dli_fname) return NULL;
  const char* slash = strrchr(info.dli_fname, '/');
  int dirLen = slash ? (int)(slash - info.dli_fname) : 1;
  snprintf(shimPath, sizeof shimPath, "%.*s/libnccl.so.2", dirLen, slash ? info.dli_fname : ".");
  return shimPath;
}

static int isNccl(const char* name) {
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  return strcmp(base, "libnccl.so.2") == 0 || strcmp(base, "libnccl.so") == 0;
}

char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag) {
  (void)cookie;
  /* LA_SER_ORIG: the name as asked for, before any search path is tried. */
  if (flag != LA_SER_ORIG || !isNccl(name)) return (char*)name;
  const char* path = shim();
  if (!path || strcmp(path, name) == 0) return (char*)name;
  const char* log = getenv("TERN_NCCL_SHIM_LOG");
  if (log && *log && strcmp(log, "0") != 0)
    fprintf(stderr, "TERN-NCCL audit: %s -> %s\n", name, path);
  return (char*)path;
}
