#include "rpc/channel_cache.h"

#include <gtest/gtest.h>

namespace tandem::rpc {
namespace {

TEST(ChannelCacheTest, ReusesTheChannelOfAnAddress) {
  ChannelCache cache;
  auto a = cache.Get("127.0.0.1:1");
  EXPECT_EQ(cache.Get("127.0.0.1:1"), a);
  EXPECT_NE(cache.Get("127.0.0.1:2"), a);
  EXPECT_EQ(cache.size(), 2);
}

TEST(ChannelCacheTest, DropsTheLeastRecentlyUsedAddressPastTheBound) {
  ChannelCache cache({.max_channels = 2});
  auto a = cache.Get("127.0.0.1:1");
  auto b = cache.Get("127.0.0.1:2");
  EXPECT_EQ(cache.Get("127.0.0.1:1"), a);  // :1 is now the most recent
  cache.Get("127.0.0.1:3");                // evicts :2
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(cache.Get("127.0.0.1:1"), a);
  EXPECT_NE(cache.Get("127.0.0.1:2"), b);  // created again
  EXPECT_EQ(cache.size(), 2);
  // 1000 distinct addresses never grow it past the bound.
  for (int i = 0; i < 1000; ++i) cache.Get("127.0.0.1:" + std::to_string(10000 + i));
  EXPECT_EQ(cache.size(), 2);
}

}  // namespace
}  // namespace tandem::rpc
