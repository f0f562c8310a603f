// A small, strict JSON reader and the writing helpers the planners and the
// cost model's file need (base/: libtern and libtern_planner both compile it).
//
// Strict on purpose: the planners' inputs are written by people and by
// profilers, and a silent default (a misspelt key ignored, a trailing comma
// accepted, a duplicate key overriding) would plan the wrong pipeline.  Every
// error is one sentence that names the offending field or position.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tern {

// An input the planners cannot use: malformed JSON, a missing or wrong field.
// The message is one sentence meant for the user (the CLI exits 2 with it).
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;  // in document order

  // The member called `key`, or nullptr (objects only).
  const Json* find(const std::string& key) const;
};

// Parses one JSON document (nothing but whitespace may follow it).
// Throws InputError "<what> is not valid JSON: ... at line L, column C."
Json parseJson(const std::string& text, const std::string& what);

// Typed access with the field's path (e.g. "stages[2].memory_bytes") in the
// error sentence.  `path` names the object being read.
const Json& member(const Json& object, const std::string& key, const std::string& path);
const Json& expectObject(const Json& value, const std::string& path);
const Json& expectArray(const Json& value, const std::string& path);
double expectNumber(const Json& value, const std::string& path);
double expectPositive(const Json& value, const std::string& path);     // > 0, finite
double expectNonNegative(const Json& value, const std::string& path);  // >= 0, finite
int64_t expectPositiveInteger(const Json& value, const std::string& path);
int64_t expectIntegerIn(const Json& value, const std::string& path, int64_t lo, int64_t hi);  // lo..hi
const std::string& expectString(const Json& value, const std::string& path);
// Rejects members not in `known` (a misspelt optional field would otherwise
// be ignored without a word).
void expectOnlyFields(const Json& object, const std::vector<std::string>& known, const std::string& path);

// "a.b" for an object member, "a[3]" for an array element.
std::string fieldPath(const std::string& parent, const std::string& key);
std::string indexPath(const std::string& parent, size_t index);

// Writing: a quoted, escaped string; a number (integers without a fraction,
// others with enough digits to round-trip the planners' figures; non-finite
// values are written as null, which JSON has instead).
std::string jsonString(const std::string& s);
std::string jsonNumber(double v);

}  // namespace tern
