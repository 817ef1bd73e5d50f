// The fixture the grant-channel tests share: a private directory for the server's socket, one
// 4 KiB registered region (generation 3) in a TestContext, and a GrantServer started on demand.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "transport/conformance/test_context.h"
#include "transport/samehost/grant_channel.h"

namespace ferry::samehost {

inline constexpr uint64_t kGrantTestIncarnation = 77;  // the fixture's context's incarnation
// How long the grant tests wait for a connect, a reply or an event.
inline constexpr std::chrono::milliseconds kGrantTestTimeout{2000};

class GrantServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ferry-grant-test-XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    ctx_.AddRegion(region_.data(), region_.size(), /*generation=*/3, true, "shm");
  }
  void TearDown() override {
    server_.reset();
    ::rmdir(dir_.c_str());
  }

  // A "shm" grant server in dir_ with `options` (transport and dir are set here).
  void StartServer(GrantServer::Options options = {}) {
    options.transport = "shm";
    options.dir = dir_;
    Result<std::unique_ptr<GrantServer>> server = GrantServer::Start(&ctx_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::string dir_;
  std::vector<uint8_t> region_ = std::vector<uint8_t>(4096);
  transport_testing::TestContext ctx_{kGrantTestIncarnation};
  std::unique_ptr<GrantServer> server_;
};

}  // namespace ferry::samehost
