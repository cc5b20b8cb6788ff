// The bridge to operator semantics (Python), memoized here: a new node's output
// shapes and cost, whether a node may stand for a pattern node, and whether a
// structural match of a rule holds, with the target side's attribute ids.
#pragma once

#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph.h"
#include "pattern.h"

namespace taso {

struct NodeInfo {
    bool ok = false;
    std::vector<int> out;
    double cost = 0;
};

class Oracle {
public:
    using InferFn = std::function<std::optional<std::pair<std::vector<int>, double>>(
        int type, int attr, const std::vector<int>& shapes)>;
    using CheckFn = std::function<std::optional<std::vector<int>>(
        int rule, const std::vector<int>& attrs, const std::vector<std::vector<int>>& outs,
        const std::vector<int>& var_shapes, const std::vector<int>& var_wonly)>;

    // May graph node (attr, input shapes) stand for source pnode `pnode` of
    // `rule`, judged on that node alone? A cheap filter; `check` decides.
    using FilterFn = std::function<bool(int rule, int pnode, int attr,
                                        const std::vector<int>& shapes)>;

    Oracle(InferFn infer, CheckFn check, FilterFn filter)
        : infer_(std::move(infer)), check_(std::move(check)), filter_(std::move(filter)) {}
    // An exception the callbacks raise (an operator's bug: "does not apply"
    // is an answer, not an exception) passes through, and nothing is memoized.
    const NodeInfo& infer(int type, int attr, const std::vector<int>& shapes);
    // `swap`: read the node's two inputs in the other order.
    bool node_ok(int rule, int pnode, const Graph& g, const Node& n, bool swap);
    const std::optional<std::vector<int>>& check(int rule, const Graph& g, const Match& m);
    size_t infer_calls = 0, check_calls = 0, filter_calls = 0;

private:
    InferFn infer_;
    CheckFn check_;
    FilterFn filter_;
    std::unordered_map<uint64_t, bool> filter_memo_;
    std::unordered_map<std::vector<int64_t>, NodeInfo, VecHash> infer_memo_;
    std::unordered_map<std::vector<int64_t>, std::optional<std::vector<int>>, VecHash> check_memo_;
};

}  // namespace taso
