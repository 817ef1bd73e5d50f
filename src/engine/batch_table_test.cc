#include "engine/batch_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ferry::engine {
namespace {

TEST(BatchTableTest, FreeRefusesOpenTasksAndFreesEndedOnesAtOnce) {
  BatchTable table;
  EXPECT_EQ(table.Allocate(0).status().code(), StatusCode::kInvalidArgument);
  Result<BatchId> id = table.Allocate(2);
  ASSERT_TRUE(id.ok());
  std::shared_ptr<Batch> batch = *table.Find(*id);
  Task& task = batch->tasks.emplace_back();
  task.batch = batch.get();
  batch->submitted.store(1);
  task.state.store(TransferState::kPending);
  int freed = 0;
  EXPECT_EQ(table.Free(*id, [&](Batch&) { ++freed; }).code(), StatusCode::kBusy);
  EXPECT_EQ(freed, 0);
  ASSERT_TRUE(task.Finish(TransferState::kTimeout, TimeoutError("late")));
  EXPECT_FALSE(task.Finish(TransferState::kCompleted, Status::Ok()));  // final is final
  EXPECT_TRUE(table.Free(*id, [&](Batch&) { ++freed; }).ok());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(table.Find(*id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table.Free(*id, nullptr).code(), StatusCode::kNotFound);
  // Whoever still holds it (a transport, a status call) keeps a valid batch.
  EXPECT_EQ(batch->Summary().state, TransferState::kTimeout);
}

TEST(BatchTableTest, StatusCallsRacingFreeReadLiveBatches) {
  BatchTable table;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> seen{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (BatchId id = 1; id < 64; ++id) {
        Result<std::shared_ptr<Batch>> b = table.Find(id);
        if (b.ok()) seen.fetch_add((*b)->Summary().tasks + 1);
      }
    }
  });
  for (int round = 0; round < 2000; ++round) {
    Result<BatchId> id = table.Allocate(1);
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(table.Free(*id, nullptr).ok());
  }
  stop.store(true);
  reader.join();
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace ferry::engine
