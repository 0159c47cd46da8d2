#pragma once
// What the query statistics tests (query_statistics_test.cpp, query_statistics_gpu_test.cpp) hold
// two runners' statistics to: element-wise |a - b| <= tol * (1 + max |b|), the scale being the
// largest magnitude of the reference, reporting the first element outside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kvevict::test {

inline void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (double x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::fabs(a[i] - b[i]), tol * (1 + scale)) << what << " at " << i << ": " << a[i] << " vs " << b[i];
}

}  // namespace kvevict::test
