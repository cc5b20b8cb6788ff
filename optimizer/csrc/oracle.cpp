// The memoized questions to Python (oracle.h).

#include "oracle.h"

#include <utility>

namespace taso {

const NodeInfo& Oracle::infer(int type, int attr, const std::vector<int>& shapes) {
    std::vector<int64_t> key;
    key.reserve(shapes.size() + 2);
    key.push_back(type);
    key.push_back(attr);
    key.insert(key.end(), shapes.begin(), shapes.end());
    auto it = infer_memo_.find(key);
    if (it != infer_memo_.end()) return it->second;
    ++infer_calls;
    NodeInfo info;
    if (auto r = infer_(type, attr, shapes)) {
        info.ok = true;
        info.out = std::move(r->first);
        info.cost = r->second;
    }
    return infer_memo_.emplace(std::move(key), std::move(info)).first->second;
}

bool Oracle::node_ok(int rule, int pnode, const Graph& g, const Node& n, bool swap) {
    // Keyed by a 64-bit digest: a collision can only pass a node to the full
    // check or hide a rewrite, never apply a wrong one.
    std::vector<int> shapes;
    for (const Ref& r : n.in) shapes.push_back(g.nodes[r.node].out[r.idx]);
    if (swap) std::swap(shapes[0], shapes[1]);
    uint64_t h = mix(mix(mix(0x51ed27ULL, rule), pnode), n.attr);
    for (int s : shapes) h = mix(h, s);
    auto it = filter_memo_.find(h);
    if (it != filter_memo_.end()) return it->second;
    ++filter_calls;
    return filter_memo_.emplace(h, filter_(rule, pnode, n.attr, shapes)).first->second;
}

const std::optional<std::vector<int>>& Oracle::check(int rule, const Graph& g, const Match& m) {
    // The key: everything the semantic check may read.
    std::vector<int64_t> key{rule};
    for (int n : m.nodes) {
        const Node& nd = g.nodes[n];
        key.push_back(nd.attr);
        key.insert(key.end(), nd.out.begin(), nd.out.end());
    }
    for (const Ref& v : m.vars) {
        const Node& nd = g.nodes[v.node];
        key.push_back(nd.out[v.idx]);
        key.push_back(nd.wonly);
    }
    auto it = check_memo_.find(key);
    if (it != check_memo_.end()) return it->second;
    ++check_calls;
    std::vector<int> attrs;
    std::vector<std::vector<int>> outs;
    for (int n : m.nodes) {
        attrs.push_back(g.nodes[n].attr);
        outs.push_back(g.nodes[n].out);
    }
    std::vector<int> vshapes, vw;
    for (const Ref& v : m.vars) {
        vshapes.push_back(g.nodes[v.node].out[v.idx]);
        vw.push_back(g.nodes[v.node].wonly);
    }
    return check_memo_.emplace(std::move(key), check_(rule, attrs, outs, vshapes, vw))
        .first->second;
}

}  // namespace taso
