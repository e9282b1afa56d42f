// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/cipher_suites.h"

#include "gtest/gtest.h"

namespace sluice::tunnel::wire {
namespace {

TEST(CipherSuitesTest, GoNamesBecomeAnOpenSslList) {
  auto list = OpenSslCipherList({"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256",
                                 "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305");
  EXPECT_EQ(*OpenSslCipherList({}), "");
  auto bad = OpenSslCipherList({"TLS_RSA_WITH_RC4_128_SHA"});
  EXPECT_NE(bad.status().message().find("considered as insecure"), std::string::npos);
}

}  // namespace
}  // namespace sluice::tunnel::wire
