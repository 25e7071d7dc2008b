// Poison (cases/tensor.h): every element of every dtype gets its dtype's pattern — a quiet NaN
// with a payload for floating types, 0xA5 bytes otherwise — on the serial path and on the
// threaded one (1 MiB and more), and count_poisoned / is_poisoned find exactly what is left.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cases/tensor.h"

namespace deltacheck::cases {
namespace {

struct Expected {
  DType dtype;
  std::vector<uint8_t> element;  // little-endian bytes of one poisoned element
};

std::vector<Expected> patterns() {
  return {{DType::kF32, {0xa5, 0xa5, 0xc5, 0x7f}},
          {DType::kBF16, {0xa5, 0x7f}},
          {DType::kF16, {0xa5, 0x7e}},
          {DType::kF64, {0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xf8, 0x7f}},
          {DType::kI32, {0xa5, 0xa5, 0xa5, 0xa5}},
          {DType::kI64, {0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5}},
          {DType::kU8, {0xa5}}};
}

TEST(Poison, EveryElementOfEveryDtypeSerialAndThreaded) {
  for (const Expected& x : patterns())
    for (int64_t n : {int64_t{37}, int64_t{(1 << 20) / dtype_size(x.dtype) + 5}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(x.dtype) << " x " << n);
      Tensor t("t", x.dtype, {n}, 0, Tensor::Init::kUnspecified);
      t.poison();
      const auto* p = static_cast<const uint8_t*>(t.data());
      const size_t es = x.element.size();
      ASSERT_EQ(static_cast<size_t>(dtype_size(x.dtype)), es);
      bool all = true;
      for (int64_t i = 0; i < n; ++i)
        all = all && std::memcmp(p + i * es, x.element.data(), es) == 0;
      EXPECT_TRUE(all);
      int64_t first = -1;
      EXPECT_EQ(t.count_poisoned(&first), n);
      EXPECT_EQ(first, 0);
      // Written elements are no longer poison; the first still poisoned one is found.
      t.set(0, 1.0);
      t.set(1, 0.0);
      EXPECT_FALSE(t.is_poisoned(0));
      EXPECT_TRUE(t.is_poisoned(2));
      EXPECT_EQ(t.count_poisoned(&first), n - 2);
      EXPECT_EQ(first, 2);
    }
}

}  // namespace
}  // namespace deltacheck::cases
