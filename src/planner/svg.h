// The few SVG elements tern's charts are drawn with (gantt.cc, collectives.cc):
// <rect>, <line> and <text>, each carrying its look in attributes, no CSS, so
// that svg_to_png.py can paint every element on its own.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace tern::planner::svg {

inline std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

inline std::string escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '&') out += "&amp;";
    else if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else out += ch;
  }
  return out;
}

// `more`: further attributes.
inline std::string rect(double x, double y, double w, double h, const std::string& fill,
                        const std::string& more = "") {
  return fmt("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", x, y, w, h) + " fill=\"" + fill + "\"" +
         more + "/>\n";
}

inline std::string line(double x1, double y1, double x2, double y2, const std::string& stroke,
                        const std::string& more = "") {
  return fmt("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", x1, y1, x2, y2) + " stroke=\"" + stroke +
         "\"" + more + "/>\n";
}

inline std::string text(double x, double y, double size, const char* anchor, const std::string& body,
                        const std::string& more = " fill=\"#222\"") {
  return fmt("<text x=\"%.2f\" y=\"%.2f\" font-size=\"%g\"", x, y, size) + " text-anchor=\"" + anchor + "\"" + more +
         ">" + escaped(body) + "</text>\n";
}

// The document around `body`, on a white ground.
inline std::string document(double width, double height, const std::string& body) {
  return fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
             width, height, width, height) +
         rect(0, 0, width, height, "white") + body + "</svg>\n";
}

}  // namespace tern::planner::svg
