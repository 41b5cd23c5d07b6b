// Reading an SVG the ladder wrote, for tests: the attributes of its <g> elements by class.
#pragma once

#include <map>
#include <regex>
#include <string>
#include <vector>

namespace iwarp::test {

// The attributes of every <g> whose class is `cls` or starts with `cls` and a space (the
// class itself under "class").
inline std::vector<std::map<std::string, std::string>> svg_groups(const std::string& svg,
                                                                  const std::string& cls) {
  std::vector<std::map<std::string, std::string>> out;
  static const std::regex g("<g class=\"([^\"]*)\"([^>]*)>");
  static const std::regex attr("([a-z-]+)=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), g); it != std::sregex_iterator();
       ++it) {
    const std::string c = (*it)[1];
    if (!c.starts_with(cls + " ") && c != cls) continue;
    std::map<std::string, std::string> a{{"class", c}};
    const std::string rest = (*it)[2];
    for (auto k = std::sregex_iterator(rest.begin(), rest.end(), attr); k != std::sregex_iterator();
         ++k)
      a[(*k)[1]] = (*k)[2];
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace iwarp::test
