// The engine's marks on a stream (stream_marks.h): made on first use.
#include "engine/stream_marks.h"

#include <memory>

namespace tern {

StreamMarks& makeMarks(Conn* c) {
  c->attached = std::make_unique<StreamMarks>();
  return static_cast<StreamMarks&>(*c->attached);
}

}  // namespace tern
