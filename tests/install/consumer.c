/* A program outside the tree, built against an installed tern. */
#include <stdio.h>
#include <tern/tern.h>

int main(void) {
  ternUniqueId id;
  ternComm_t comm;
  float x[3] = {1, 2, 3};
  if (ternGetUniqueId(&id) || ternCommInitRank(&comm, 1, id, 0)) return 1;
  if (ternAllReduce(x, x, 3, ternFloat32, ternSum, comm, NULL) || x[2] != 3) return 2;
  ternCommDestroy(comm);
  printf("consumer ok\n");
  return 0;
}
