// Streaming DiLoCo's fragments and their schedule.
#include "optim/fragment_plan.hpp"

#include <gtest/gtest.h>

#include <set>

#include "config/config.hpp"
#include "model/gpt.hpp"
#include "runtime/error.hpp"

namespace nanogpt {
namespace {

TEST(FragmentPlan, TensorsGoWithTheirLayers) {
  EXPECT_EQ(fragment_layer_of("blocks.7.mlp.c_fc.weight", 12), 7);
  EXPECT_EQ(fragment_layer_of("blocks.11.lambdas", 12), 11);
  EXPECT_EQ(fragment_layer_of("embed.weight", 12), 0);
  EXPECT_EQ(fragment_layer_of("value_embeds.2.weight", 12), 2);
  EXPECT_EQ(fragment_layer_of("lm_head.weight", 12), 11);
  EXPECT_EQ(fragment_layer_of("skip_weights", 12), 6);
}

TEST(FragmentPlan, StridedAndSequentialAssignments) {
  for (int64_t layer = 0; layer < 12; ++layer) {
    EXPECT_EQ(fragment_of_layer(layer, 12, 4, FragmentOrder::kStrided), layer % 4);
    EXPECT_EQ(fragment_of_layer(layer, 12, 4, FragmentOrder::kSequential), layer / 3);
  }
  EXPECT_EQ(fragment_of_layer(5, 6, 4, FragmentOrder::kSequential),
            3);  // uneven: 6 layers in 4 runs
}

// Every parameter is in exactly one fragment, and the runs cover the fragment's tensors.
TEST(FragmentPlan, FragmentsPartitionTheParameters) {
  Config c = preset("cpu");
  c.vocab_size = 512;
  c.eot_id = 511;
  Gpt model(c);
  for (FragmentOrder order : {FragmentOrder::kStrided, FragmentOrder::kSequential}) {
    for (int64_t P : {1, 2, 3, 6}) {
      const auto frags = plan_fragments(model.params().tensors(), c.num_layers, P, order);
      ASSERT_EQ(frags.size(), static_cast<size_t>(P));
      std::vector<int> covered(model.params().size(), 0);
      size_t total = 0;
      for (const OuterFragment& f : frags) {
        size_t in_runs = 0;
        for (const ParamRun& run : f.runs) {
          for (size_t i = 0; i < run.count; ++i) covered[run.offset + i] += 1;
          in_runs += run.count;
        }
        EXPECT_EQ(in_runs, f.numel);
        total += f.numel;
        EXPECT_FALSE(f.tensors.empty()) << fragment_order_name(order) << " P=" << P;
      }
      EXPECT_EQ(total, model.params().size());
      for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << i;
    }
  }
}

// Fragment p leaves at steps p·H/P, p·H/P + H, ...: one fragment every H/P steps.
TEST(FragmentPlan, ScheduleStaggersTheFragments) {
  const int64_t P = 3, H = 6;
  for (int64_t p = 0; p < P; ++p) {
    std::vector<int64_t> steps;
    for (int64_t t = 0; t <= 20; ++t) {
      if (fragment_syncs_after(t, p, P, H)) steps.push_back(t);
    }
    const std::vector<std::vector<int64_t>> want = {{6, 12, 18}, {2, 8, 14, 20}, {4, 10, 16}};
    EXPECT_EQ(steps, want[static_cast<size_t>(p)]) << "fragment " << p;
  }
  for (int64_t t = 1; t <= 60; ++t) {
    int leaving = 0;
    for (int64_t p = 0; p < P; ++p) leaving += fragment_syncs_after(t, p, P, H) ? 1 : 0;
    EXPECT_EQ(leaving, t % 2 == 0 ? 1 : 0) << "step " << t;
  }
}

TEST(FragmentPlan, ConfigResolvesTheModesDefaults) {
  Config c = preset("cpu");
  c.sync = SyncMode::kStreamingDiloco;
  EXPECT_EQ(c.outer_fragments(), 2);  // 6 layers, 3 each
  EXPECT_EQ(c.outer_sync_delay(), 1);
  EXPECT_EQ(c.outer_merge_alpha(), 0.5);
  EXPECT_EQ(c.outer_bits(), 4);
  c.sync_delay = 0;
  EXPECT_EQ(c.outer_merge_alpha(), 0.0);
  c.sync = SyncMode::kDiloco;
  c.sync_delay = -1;
  EXPECT_EQ(c.outer_fragments(), 1);
  EXPECT_EQ(c.outer_sync_delay(), 0);
  EXPECT_EQ(c.outer_bits(), 32);
  validate_config(c);
}

TEST(FragmentPlan, BadDilocoSettingsAreRefusedByName) {
  auto refused = [](void (*edit)(Config&), const char* field) {
    Config c = preset("cpu");
    edit(c);
    try {
      validate_config(c);
      ADD_FAILURE() << "accepted; expected an error about " << field;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused([](Config& c) { c.replicas = 2; }, "replicas");  // with ddp
  refused([](Config& c) { c.sync = SyncMode::kStreamingDiloco, c.sync_every = 5; }, "sync_every");
  refused([](Config& c) { c.sync = SyncMode::kStreamingDiloco, c.sync_delay = 50; }, "sync_delay");
  refused([](Config& c) { c.sync = SyncMode::kDiloco, c.fragments = 2; }, "sync");
  refused([](Config& c) { c.outer_grad_bits = 6; }, "outer_grad_bits");
  refused([](Config& c) { c.outer_momentum = 1; }, "outer_momentum");
  refused([](Config& c) { c.fragment_merge_alpha = 1.5; }, "fragment_merge_alpha");
  for (const char* bad : {"sync=gossip", "fragment_order=random"}) {
    Config c = preset("cpu");
    try {
      set_config_value(c, bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "'" + std::string(bad).substr(0, std::string(bad).find('=')) + "'"),
                std::string::npos)
          << e.what();
    }
  }
  Config c = preset("cpu");
  set_config_value(c, "sync=streaming_diloco");
  set_config_value(c, "fragment_order=sequential");
  EXPECT_EQ(c.sync, SyncMode::kStreamingDiloco);
  EXPECT_EQ(c.fragment_order, FragmentOrder::kSequential);
  EXPECT_EQ(config_to_json(c)["sync"], "streaming_diloco");
}

}  // namespace
}  // namespace nanogpt
