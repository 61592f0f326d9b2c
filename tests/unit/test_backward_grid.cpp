// The backward's grid order under a causal mask (bwdLongestWalksFirst): a
// bijection onto (key tile, kv head, batch) that, within each group of
// kBwdLaneGroup (kv head, batch) lanes, starts every lane's key tile 0
// before any lane's tile 1, and so on.
#include "attn_params.h"

#include <catch2/catch.hpp>

#include <vector>

TEST_CASE("the backward's causal grid order is a bijection, key-tile-major within lane groups",
          "[backward][grid]") {
  using attn_abi::kBwdLaneGroup;
  for (unsigned tiles : {1u, 2u, 5u, 64u})
    for (unsigned kvHeads : {1u, 3u, 16u})
      for (unsigned batches : {1u, 2u, 3u}) {
        INFO("tiles=" << tiles << " kv heads=" << kvHeads << " batches=" << batches);
        const unsigned lanes = kvHeads * batches;
        std::vector<int> seen(static_cast<size_t>(tiles) * lanes, 0);
        unsigned previousGroup = 0, previousTile = 0;
        // How many lanes of the current group have taken the current tile.
        unsigned lanesAtTile = 0;
        for (unsigned linear = 0; linear < tiles * lanes; ++linear) {
          const attn_abi::BwdGridPosition position =
              attn_abi::bwdLongestWalksFirst(linear, tiles, kvHeads, batches);
          REQUIRE(position.keyTile < tiles);
          REQUIRE(position.kvHead < kvHeads);
          REQUIRE(position.batch < batches);
          const unsigned lane = position.batch * kvHeads + position.kvHead;
          ++seen[static_cast<size_t>(position.keyTile) * lanes + lane];
          const unsigned group = lane / kBwdLaneGroup;
          const unsigned groupLanes =
              lanes - group * kBwdLaneGroup < kBwdLaneGroup ? lanes - group * kBwdLaneGroup
                                                            : kBwdLaneGroup;
          if (linear == 0 || group != previousGroup) {
            // A group starts at its first lane's key tile 0, after the last
            // group has ended.
            CHECK(group == (linear == 0 ? 0 : previousGroup + 1));
            CHECK(position.keyTile == 0);
            lanesAtTile = 1;
          } else if (position.keyTile == previousTile) {
            ++lanesAtTile;
          } else {
            // The next tile only once every lane of the group took this one.
            CHECK(position.keyTile == previousTile + 1);
            CHECK(lanesAtTile == groupLanes);
            lanesAtTile = 1;
          }
          CHECK(lanesAtTile <= groupLanes);
          previousGroup = group;
          previousTile = position.keyTile;
        }
        for (int count : seen)
          REQUIRE(count == 1);
      }
}
