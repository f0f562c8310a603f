#include "model/model_file.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/json.h"

namespace tern::model {

using tern::InputError;
using tern::Json;

namespace {

constexpr const char* kFormat = "tern collective model";
const char* const kTermKeys[] = {"latency_us", "small_latency_us", "ns_per_byte", "ns_per_reduced_byte"};

double* termOf(LinkParams& p, int t) {
  double* terms[] = {&p.latencyUs, &p.smallLatencyUs, &p.nsPerByte, &p.nsPerReducedByte};
  return terms[t];
}

}  // namespace

std::string modelJson(const Model& m) {
  using tern::jsonNumber;
  std::string out = "{\"format\": \"" + std::string(kFormat) + "\", \"version\": 1,\n \"source\": " +
                    tern::jsonString(m.source) + ",\n \"links\": {";
  for (int l = 0; l < kLinks; ++l) {
    LinkParams p = m.links[l];
    out += std::string(l ? ",\n" : "\n") + "  \"" + linkName(static_cast<Link>(l)) + "\": {";
    for (int t = 0; t < kTermsPerLink; ++t)
      out += std::string(t ? ", " : "") + "\"" + kTermKeys[t] + "\": " + jsonNumber(*termOf(p, t));
    out += "}";
  }
  return out + "},\n \"codec\": {\"ns_per_byte\": " + jsonNumber(m.codecNsPerByte) + "}}\n";
}

Model parseModel(const std::string& text, const std::string& what) {
  const Json doc = tern::parseJson(text, what);
  try {
    tern::expectObject(doc, "the document");
    const Json* format = doc.find("format");
    if (!format || format->type != Json::Type::String || format->string != kFormat)
      throw InputError("it is not a tern collective model (its \"format\" must be \"" + std::string(kFormat) +
                       "\").");
    tern::expectOnlyFields(doc, {"format", "version", "source", "links", "codec"}, "");
    if (tern::expectIntegerIn(tern::member(doc, "version", ""), "version", 1, INT_MAX) != 1)
      throw InputError("version must be 1, the only one this tern reads.");
    Model m;
    if (const Json* s = doc.find("source")) m.source = tern::expectString(*s, "source");
    const Json& links = tern::expectObject(tern::member(doc, "links", ""), "links");
    tern::expectOnlyFields(links, {"shm", "tcp", "ucx"}, "links");
    for (int l = 0; l < kLinks; ++l) {
      const std::string path = std::string("links.") + linkName(static_cast<Link>(l));
      const Json& o = tern::expectObject(tern::member(links, linkName(static_cast<Link>(l)), "links"), path);
      tern::expectOnlyFields(o, std::vector<std::string>(kTermKeys, kTermKeys + kTermsPerLink), path);
      for (int t = 0; t < kTermsPerLink; ++t)
        *termOf(m.links[l], t) =
            tern::expectNonNegative(tern::member(o, kTermKeys[t], path), tern::fieldPath(path, kTermKeys[t]));
    }
    const Json& codec = tern::expectObject(tern::member(doc, "codec", ""), "codec");
    tern::expectOnlyFields(codec, {"ns_per_byte"}, "codec");
    m.codecNsPerByte = tern::expectNonNegative(tern::member(codec, "ns_per_byte", "codec"), "codec.ns_per_byte");
    return m;
  } catch (const InputError& e) {
    throw InputError(what + ": " + e.what());
  }
}

Model loadModelFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read the model file " + path + ": " + std::strerror(errno) + ".");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseModel(ss.str(), "the model file " + path);
}

std::vector<Measurement> parseMeasurements(const std::string& text, const std::string& what) {
  const Json doc = tern::parseJson(text, what);
  try {
    tern::expectObject(doc, "the document");
    tern::expectOnlyFields(doc, {"measurements", "source"}, "");
    const auto& items = tern::expectArray(tern::member(doc, "measurements", ""), "measurements").array;
    std::vector<Measurement> out;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string path = tern::indexPath("measurements", i);
      const Json& o = tern::expectObject(items[i], path);
      tern::expectOnlyFields(o, {"algorithm", "link", "hosts", "ranks", "ranks_per_host", "bytes", "dtype_bytes",
                                    "time_us"}, path);
      Measurement me;
      const std::string& algo = tern::expectString(tern::member(o, "algorithm", path), path + ".algorithm");
      if (!parseAlgo(algo, &me.algo))
        throw InputError(path + ".algorithm \"" + algo +
                         "\" is not one of small, rd, ring, twolevel, ternary, ternary-twolevel.");
      const std::string& link = tern::expectString(tern::member(o, "link", path), path + ".link");
      if (!parseLink(link, &me.link)) throw InputError(path + ".link \"" + link + "\" is not shm, tcp or ucx.");
      const int hosts = static_cast<int>(
          tern::expectIntegerIn(tern::member(o, "hosts", path), path + ".hosts", 1, 1 << 20));
      if (const Json* per = o.find("ranks_per_host")) {
        for (size_t h = 0; h < tern::expectArray(*per, path + ".ranks_per_host").array.size(); ++h)
          me.layout.ranksPerHost.push_back(static_cast<int>(tern::expectIntegerIn(
              per->array[h], tern::indexPath(path + ".ranks_per_host", h), 1, 1 << 20)));
        if (me.layout.hosts() != hosts)
          throw InputError(path + ".ranks_per_host lists " + std::to_string(me.layout.hosts()) + " hosts, not " +
                           std::to_string(hosts) + ".");
      } else {
        const int ranks = static_cast<int>(
            tern::expectIntegerIn(tern::member(o, "ranks", path), path + ".ranks", hosts, 1 << 24));
        me.layout = spreadLayout(ranks, hosts);
      }
      if (const Json* r = o.find("ranks"); r && o.find("ranks_per_host") &&
                                           tern::expectNumber(*r, path + ".ranks") != me.layout.ranks())
        throw InputError(path + ".ranks is not the sum of its ranks_per_host.");
      me.bytes = tern::expectPositive(tern::member(o, "bytes", path), path + ".bytes");
      if (const Json* d = o.find("dtype_bytes"))
        me.dtypeBytes = static_cast<int>(tern::expectIntegerIn(*d, path + ".dtype_bytes", 1, 16));
      me.timeUs = tern::expectPositive(tern::member(o, "time_us", path), path + ".time_us");
      if (hosts == 1) me.link = Link::Shm;
      else if (me.link == Link::Shm)
        throw InputError(path + " spans " + std::to_string(hosts) + " hosts: its link is tcp or ucx, not shm.");
      out.push_back(me);
    }
    return out;
  } catch (const InputError& e) {
    throw InputError(what + ": " + e.what());
  }
}

}  // namespace tern::model
