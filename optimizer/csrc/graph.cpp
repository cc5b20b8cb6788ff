// Building graphs: topological order, dead-node removal, common-node merging,
// weight-only flags, cost, hash and the constant bytes a run reads.

#include <stdexcept>
#include <unordered_map>

#include "core.h"

namespace taso {

namespace {

bool same_node(const Node& a, const Node& b) {
    return a.type == b.type && a.attr == b.attr && a.salt == b.salt && a.in == b.in;
}

}  // namespace

size_t VecHash::operator()(const std::vector<int64_t>& v) const {
    uint64_t h = v.size();
    for (int64_t x : v) h = mix(h, static_cast<uint64_t>(x));
    return static_cast<size_t>(h);
}

Core::Core(std::vector<int> kinds_, Oracle::InferFn infer, Oracle::CheckFn check,
           Oracle::FilterFn filter, std::vector<char> commutative_)
    : oracle(std::move(infer), std::move(check), std::move(filter)), kinds(std::move(kinds_)),
      commutative(std::move(commutative_)) {}

std::optional<Graph> Core::finalize(std::vector<Node> raw, std::vector<Ref> outputs,
                                    std::vector<int>* remap_out) {
    ++n_built;
    const int n = static_cast<int>(raw.size());
    // Depth-first post-order from the outputs: a topological order of the live
    // nodes; meeting a node still on the stack means a cycle.
    std::vector<char> state(n, 0);  // 0 new, 1 on stack, 2 done
    std::vector<int> order;
    order.reserve(n);
    std::vector<std::pair<int, int>> stack;
    for (const Ref& o : outputs) {
        if (state[o.node]) continue;
        stack.push_back({o.node, 0});
        state[o.node] = 1;
        while (!stack.empty()) {
            auto& [v, i] = stack.back();
            if (i < static_cast<int>(raw[v].in.size())) {
                int u = raw[v].in[i++].node;
                if (state[u] == 1) return std::nullopt;
                if (state[u] == 0) {
                    state[u] = 1;
                    stack.push_back({u, 0});
                }
            } else {
                state[v] = 2;
                order.push_back(v);
                stack.pop_back();
            }
        }
    }
    Graph g;
    g.nodes.reserve(order.size());
    std::vector<int> remap(n, -1);
    std::unordered_map<uint64_t, int> seen;
    seen.reserve(order.size() * 2);
    uint64_t gh = 0;
    for (int v : order) {
        Node nd = std::move(raw[v]);
        uint64_t h = node_seed(nd.type, nd.attr, nd.salt);
        bool wonly = kinds[nd.type] == WEIGHT || kinds[nd.type] == CONSTGEN ||
                     (kinds[nd.type] == COMPUTE && !nd.in.empty());
        for (Ref& r : nd.in) r.node = remap[r.node];
        if (is_commutative(nd)) {
            // Canonical operand order: swapped operands are the same node.
            auto key = [&](const Ref& r) { return std::make_pair(g.nodes[r.node].hash, r.idx); };
            if (key(nd.in[1]) < key(nd.in[0])) std::swap(nd.in[0], nd.in[1]);
        }
        for (const Ref& r : nd.in) {
            const Node& p = g.nodes[r.node];
            h = mix(mix(h, p.hash), r.idx);
            wonly = wonly && p.wonly;
        }
        auto it = seen.find(h);
        if (it != seen.end() && same_node(g.nodes[it->second], nd)) {
            remap[v] = it->second;  // the same computation exists: share it
            continue;
        }
        nd.hash = h;
        nd.wonly = wonly;
        const int k = kinds[nd.type];
        if (!wonly && k != INPUT) g.num_ops++;  // run-time operators only
        // Weight-only computations are folded before the model runs: free.
        if (!(wonly && (k == COMPUTE || k == CONSTGEN))) g.cost += nd.cost;
        remap[v] = static_cast<int>(g.nodes.size());
        seen.emplace(h, remap[v]);
        g.nodes.push_back(std::move(nd));
    }
    for (Ref& o : outputs) {
        o.node = remap[o.node];
        gh = mix(mix(gh, g.nodes[o.node].hash), o.idx);
    }
    g.outputs = std::move(outputs);
    g.hash = gh;
    if (remap_out) *remap_out = std::move(remap);
    if (byte_cost > 0) g.const_bytes = constant_bytes(g);
    return g;
}

double Core::constant_bytes(const Graph& g) const {
    std::vector<size_t> first(g.nodes.size() + 1, 0);  // index of a node's first output
    for (size_t v = 0; v < g.nodes.size(); ++v) first[v + 1] = first[v] + g.nodes[v].out.size();
    std::vector<char> counted(first.back(), 0);
    double total = 0;
    auto read = [&](const Ref& r) {
        const Node& p = g.nodes[r.node];
        char& c = counted[first[r.node] + r.idx];
        if (!p.wonly || c) return;
        c = 1;
        const int s = p.out[r.idx];
        total += s < static_cast<int>(shape_bytes.size()) ? shape_bytes[s] : 0.0;
    };
    for (size_t v = 0; v < g.nodes.size(); ++v) {
        const Node& nd = g.nodes[v];
        if (kinds[nd.type] == WEIGHT && pinned.count(nd.salt))
            read({static_cast<int>(v), 0});
        else if (!nd.wonly)
            for (const Ref& r : nd.in) read(r);
    }
    for (const Ref& o : g.outputs) read(o);
    return total;
}

Graph Core::build(std::vector<Node> raw, std::vector<Ref> outputs) {
    for (size_t i = 0; i < raw.size(); ++i) {
        Node& nd = raw[i];
        if (nd.type < 0 || nd.type >= static_cast<int>(kinds.size()))
            throw std::invalid_argument("node type out of range");
        std::vector<int> shapes;
        for (const Ref& r : nd.in) {
            if (r.node < 0 || r.node >= static_cast<int>(i) || r.idx < 0 ||
                r.idx >= static_cast<int>(raw[r.node].out.size()))
                throw std::invalid_argument("node input must be an earlier node's output");
            shapes.push_back(raw[r.node].out[r.idx]);
        }
        const NodeInfo& info = oracle.infer(nd.type, nd.attr, shapes);
        if (!info.ok) throw std::invalid_argument("the oracle rejects a node of the input graph");
        nd.out = info.out;
        nd.cost = info.cost;
    }
    for (const Ref& o : outputs)
        if (o.node < 0 || o.node >= static_cast<int>(raw.size()) ||
            o.idx >= static_cast<int>(raw[o.node].out.size()))
            throw std::invalid_argument("graph output out of range");
    auto g = finalize(std::move(raw), std::move(outputs));
    if (!g) throw std::invalid_argument("the input graph has a cycle");
    return *g;
}

}  // namespace taso
