#include "engine/tokenizer/jinja/template.h"

#include <gtest/gtest.h>

namespace tandem::engine::jinja {
namespace {

TEST(JinjaTest, Placeholder) { EXPECT_TRUE(true); }

}  // namespace
}  // namespace tandem::engine::jinja
