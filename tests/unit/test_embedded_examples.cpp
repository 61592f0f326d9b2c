// The GPU tests read the shipped example specs from the binary
// (tests/gpu/EmbeddedExamples.h), so they run from any directory; this
// checks the embedded copies against docs/examples itself.
#include "EmbeddedExamples.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

TEST_CASE("every example spec is embedded, byte for byte", "[examples]") {
  std::map<std::string, std::string> onDisk;
  for (const auto &entry : std::filesystem::directory_iterator(ATTNC_DOCS_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".mlir")
      continue;
    std::ifstream file(entry.path(), std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    onDisk[entry.path().filename().string()] = text.str();
  }
  REQUIRE(onDisk.size() >= 10);

  std::map<std::string, std::string> embedded;
  for (const attn::gputest::EmbeddedExample &example : attn::gputest::embeddedExamples())
    embedded[example.path] = example.contents;
  CHECK(embedded == onDisk);
}
