#include "base/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tern {
namespace {

constexpr int kMaxDepth = 256;  // deeper nesting is no planner input; stops stack exhaustion

// JSON's two-character escapes: the letter after '\\' and what it stands for.
constexpr char kEscapes[][2] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', '\b'},
                                {'f', '\f'}, {'n', '\n'}, {'r', '\r'}, {'t', '\t'}};

class Parser {
 public:
  Parser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  Json document() {
    Json v = value(0);
    skipSpace();
    if (pos_ != s_.size()) fail("unexpected text after the document");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw InputError(what_ + " is not valid JSON: " + why + " at line " + std::to_string(line) +
                     ", column " + std::to_string(column) + ".");
  }

  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  bool consumeWord(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    skipSpace();
    Json v;
    char c = peek();
    if (c == '{') {
      object(v, depth);
    } else if (c == '[') {
      array(v, depth);
    } else if (c == '"') {
      v.type = Json::Type::String;
      v.string = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = Json::Type::Number;
      v.number = number();
    } else if (consumeWord("true")) {
      v.type = Json::Type::Bool;
      v.boolean = true;
    } else if (consumeWord("false")) {
      v.type = Json::Type::Bool;
    } else if (consumeWord("null")) {
      v.type = Json::Type::Null;
    } else {
      fail(c == '\0' ? "the document ends where a value was expected" : "expected a value");
    }
    return v;
  }

  // `open`, elements separated by commas (none after the last), `close`.
  template <typename Element>
  void sequence(char open, char close, Element element) {
    expect(open);
    skipSpace();
    if (peek() == close) {
      ++pos_;
      return;
    }
    for (;;) {
      element();
      skipSpace();
      if (peek() != ',') break;
      ++pos_;
    }
    expect(close);
  }

  void object(Json& v, int depth) {
    v.type = Json::Type::Object;
    sequence('{', '}', [&] {
      skipSpace();
      if (peek() != '"') fail("expected a quoted member name");
      std::string key = string();
      if (v.find(key)) fail("duplicate member \"" + key + "\"");
      skipSpace();
      expect(':');
      v.object.emplace_back(std::move(key), value(depth + 1));
    });
  }

  void array(Json& v, int depth) {
    v.type = Json::Type::Array;
    sequence('[', ']', [&] { v.array.push_back(value(depth + 1)); });
  }

  // JSON's number grammar exactly (no leading '+', no leading zeros, no
  // bare '.', no hex, no inf/nan), then strtod on the validated span.
  double number() {
    size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      digits();
    } else {
      fail("expected a digit");
    }
    if (peek() == '.') {
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit after '.'");
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit in the exponent");
      digits();
    }
    std::string span = s_.substr(start, pos_ - start);
    double d = std::strtod(span.c_str(), nullptr);
    if (!std::isfinite(d)) {
      pos_ = start;
      fail("number out of range");
    }
    return d;
  }

  void digits() {
    while (peek() >= '0' && peek() <= '9') ++pos_;
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      char c = peek();
      unsigned d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail("expected four hex digits after \\u");
      u = u * 16 + d;
      ++pos_;
    }
    return u;
  }

  static void appendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  unsigned escapedCodePoint() {
    unsigned cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair encodes one code point
      if (!consumeWord("\\u")) fail("expected the low half of a surrogate pair");
      unsigned lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail("invalid low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      fail("unpaired low surrogate");
    }
    return cp;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = peek();
      ++pos_;
      if (e == 'u') {
        appendUtf8(out, escapedCodePoint());
        continue;
      }
      const char* hit = nullptr;
      for (const auto& esc : kEscapes)
        if (esc[0] == e) hit = esc;
      if (!hit) {
        --pos_;
        fail("invalid escape in a string");
      }
      out += hit[1];
    }
  }

  const std::string& s_;
  const std::string& what_;
  size_t pos_ = 0;
};

const char* typeName(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "a boolean";
    case Json::Type::Number: return "a number";
    case Json::Type::String: return "a string";
    case Json::Type::Array: return "an array";
    case Json::Type::Object: return "an object";
  }
  return "a value";
}

[[noreturn]] void wrongType(const Json& value, const std::string& path, const char* wanted) {
  throw InputError(path + " must be " + wanted + ", not " + typeName(value.type) + ".");
}

}  // namespace

const Json* Json::find(const std::string& key) const {
  for (const auto& kv : object)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

Json parseJson(const std::string& text, const std::string& what) { return Parser(text, what).document(); }

std::string fieldPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string indexPath(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

const Json& expectObject(const Json& value, const std::string& path) {
  if (value.type != Json::Type::Object) wrongType(value, path.empty() ? "the document" : path, "an object");
  return value;
}

const Json& member(const Json& object, const std::string& key, const std::string& path) {
  expectObject(object, path);
  const Json* v = object.find(key);
  if (!v) throw InputError("the field " + fieldPath(path, key) + " is missing.");
  return *v;
}

const Json& expectArray(const Json& value, const std::string& path) {
  if (value.type != Json::Type::Array) wrongType(value, path, "an array");
  return value;
}

double expectNumber(const Json& value, const std::string& path) {
  if (value.type != Json::Type::Number) wrongType(value, path, "a number");
  return value.number;
}

double expectPositive(const Json& value, const std::string& path) {
  double d = expectNumber(value, path);
  if (!(d > 0)) throw InputError(path + " must be positive, not " + jsonNumber(d) + ".");
  return d;
}

double expectNonNegative(const Json& value, const std::string& path) {
  double d = expectNumber(value, path);
  if (d < 0) throw InputError(path + " must not be negative, not " + jsonNumber(d) + ".");
  return d;
}

namespace {

int64_t whole(double d, const std::string& path) {
  if (d != std::floor(d) || std::fabs(d) > 9007199254740992.0)  // 2^53: exact in a double
    throw InputError(path + " must be a whole number, not " + jsonNumber(d) + ".");
  return static_cast<int64_t>(d);
}

}  // namespace

int64_t expectPositiveInteger(const Json& value, const std::string& path) {
  return whole(expectPositive(value, path), path);
}

int64_t expectIntegerIn(const Json& value, const std::string& path, int64_t lo, int64_t hi) {
  const int64_t n = whole(expectNumber(value, path), path);
  if (n < lo || n > hi)
    throw InputError(path + " must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " +
                     std::to_string(n) + ".");
  return n;
}

const std::string& expectString(const Json& value, const std::string& path) {
  if (value.type != Json::Type::String) wrongType(value, path, "a string");
  return value.string;
}

void expectOnlyFields(const Json& object, const std::vector<std::string>& known, const std::string& path) {
  expectObject(object, path);
  for (const auto& kv : object.object) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == kv.first;
    if (ok) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw InputError(fieldPath(path, kv.first) + " is not a known field (known: " + list + ").");
  }
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    const char* hit = nullptr;
    for (const auto& esc : kEscapes)
      if (esc[1] == static_cast<char>(c) && esc[0] != '/') hit = esc;  // '/' needs no escape
    if (hit) {
      out += '\\';
      out += hit[0];
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace tern
