// The committed captures the replay tests run over: every .pcap of pcap_traces/generated and
// pcap_traces/siw, sorted by path.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace testing_support {

inline std::vector<std::string> corpus_captures() {
  std::vector<std::string> files;
  for (const char* dir : {"pcap_traces/generated", "pcap_traces/siw"})
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(IWARP_SOURCE_DIR) + "/" + dir))
      if (e.path().extension() == ".pcap") files.push_back(e.path().string());
  std::ranges::sort(files);
  return files;
}

}  // namespace testing_support
