// Rewriting: the one match -> filter -> apply loop and what is built on it
// (expand, hash_checks, the search's expansion), applying a match, and
// predicting the rewritten graph's hash without building it.

#include <algorithm>
#include <functional>

#include "core.h"

namespace taso {

// Whether `t` names an existing output of an existing node of `raw`.
static bool has_output(const std::vector<Node>& raw, const Ref& t) {
    return t.node >= 0 && t.node < static_cast<int>(raw.size()) && t.idx >= 0 &&
           t.idx < static_cast<int>(raw[t.node].out.size());
}

std::optional<Graph> Core::apply(const Graph& g, int ri, const Match& m,
                                 const std::vector<int>& dst_attrs, std::vector<int>* targets) {
    const Rule& r = rules[ri];
    std::vector<Node> raw = g.nodes;
    const int n = static_cast<int>(raw.size());
    for (size_t j = 0; j < r.dst.size(); ++j) {
        Node nd;
        nd.type = r.dst[j].type;
        nd.attr = dst_attrs[j];
        std::vector<int> shapes;
        for (const Ref& pin : r.dst[j].in) {
            Ref t = pin.node < 0 ? m.vars[-1 - pin.node] : Ref{n + pin.node, pin.idx};
            if (!has_output(raw, t)) return std::nullopt;
            nd.in.push_back(t);
            shapes.push_back(raw[t.node].out[t.idx]);
        }
        const NodeInfo& info = oracle.infer(nd.type, nd.attr, shapes);
        if (!info.ok) return std::nullopt;
        nd.out = info.out;
        nd.cost = info.cost;
        raw.push_back(std::move(nd));
    }
    // Redirect every use of a replaced source tensor to its target tensor.
    std::vector<std::pair<Ref, Ref>> repl;
    for (const auto& [s, d] : r.outputs) {
        Ref from{m.nodes[s.node], s.idx}, to{n + d.node, d.idx};
        if (d.node < 0) to = m.vars[-1 - d.node];
        if (!has_output(raw, from) || !has_output(raw, to) ||
            raw[from.node].out[from.idx] != raw[to.node].out[to.idx])
            return std::nullopt;
        repl.push_back({from, to});
    }
    auto redirect = [&](Ref& t) {
        for (const auto& [from, to] : repl)
            if (t == from) {
                t = to;
                return;
            }
    };
    for (Node& nd : raw)
        for (Ref& t : nd.in) redirect(t);
    std::vector<Ref> outputs = g.outputs;
    for (Ref& t : outputs) redirect(t);
    if (!targets) return finalize(std::move(raw), std::move(outputs));
    std::vector<int> remap;
    auto out = finalize(std::move(raw), std::move(outputs), &remap);
    targets->clear();
    for (size_t j = 0; j < r.dst.size(); ++j)
        targets->push_back(out ? remap[n + j] : -1);
    return out;
}

bool Core::creates_cycle(const Graph& g, const Rule& r, const Match& m) {
    // Which replaced source tensors (rule outputs) each variable depends on,
    // through nodes downstream of the match (dirty_ marks them).
    const int nv = r.nvars, no = static_cast<int>(r.outputs.size());
    std::vector<std::vector<int>> reaches(nv);
    std::vector<int> stamp(g.nodes.size(), -1);
    for (int v = 0; v < nv; ++v) {
        std::vector<Ref> stack{m.vars[v]};
        while (!stack.empty()) {
            Ref t = stack.back();
            stack.pop_back();
            if (!dirty_[t.node]) continue;
            bool replaced = false;
            if (dirty_[t.node] == 2)
                for (int o = 0; o < no; ++o)
                    if (m.nodes[r.outputs[o].first.node] == t.node &&
                        r.outputs[o].first.idx == t.idx) {
                        reaches[v].push_back(o);
                        replaced = true;
                    }
            if (replaced || stamp[t.node] == v) continue;
            stamp[t.node] = v;
            for (const Ref& in : g.nodes[t.node].in) stack.push_back(in);
        }
    }
    // A cycle in: variable -> rule output it depends on -> variables its target reads.
    std::vector<char> state(nv, 0);
    std::function<bool(int)> visit = [&](int v) {
        state[v] = 1;
        for (int o : reaches[v])
            for (int w : r.dst_deps[o]) {
                if (state[w] == 1) return true;
                if (state[w] == 0 && visit(w)) return true;
            }
        state[v] = 2;
        return false;
    };
    for (int v = 0; v < nv; ++v)
        if (state[v] == 0 && visit(v)) return true;
    return false;
}

std::optional<uint64_t> Core::rewrite_hash(const Graph& g, int ri, const Match& m,
                                           const std::vector<int>& dst_attrs,
                                           const std::vector<std::vector<int>>& consumers,
                                           bool& cycle) {
    const Rule& r = rules[ri];
    cycle = false;
    const int n = static_cast<int>(g.nodes.size());
    // Nodes are in topological order: one forward pass marks the descendants.
    dirty_.assign(n, 0);
    int lo = n;
    for (int c : m.nodes) {
        dirty_[c] = 2;  // matched
        lo = std::min(lo, c);
    }
    for (int v = lo; v < n; ++v)
        if (dirty_[v])
            for (int u : consumers[v])
                if (!dirty_[u]) dirty_[u] = 1;
    for (const Ref& v : m.vars)
        if (dirty_[v.node]) {
            if (creates_cycle(g, r, m)) cycle = true;
            return std::nullopt;
        }
    // A node's hash from its (input hash, output index) pairs, in finalize's
    // canonical operand order for a commutative type.
    using In = std::pair<uint64_t, int>;
    std::vector<In> buf;
    auto hash_of = [&](uint64_t h, int type, size_t k, auto&& in_at) {
        buf.clear();
        for (size_t i = 0; i < k; ++i) buf.push_back(in_at(i));
        if (k == 2 && type < static_cast<int>(commutative.size()) && commutative[type] &&
            buf[1] < buf[0])
            std::swap(buf[0], buf[1]);
        for (const In& x : buf) h = mix(mix(h, x.first), x.second);
        return h;
    };
    dst_hash_.resize(r.dst.size());
    for (size_t j = 0; j < r.dst.size(); ++j) {
        const auto& ins = r.dst[j].in;
        dst_hash_[j] = hash_of(node_seed(r.dst[j].type, dst_attrs[j], 0),
                               r.dst[j].type, ins.size(), [&](size_t i) -> In {
                                   const Ref& pin = ins[i];
                                   if (pin.node < 0) {
                                       const Ref& t = m.vars[-1 - pin.node];
                                       return {g.nodes[t.node].hash, t.idx};
                                   }
                                   return {dst_hash_[pin.node], pin.idx};
                               });
    }
    new_hash_.resize(n);
    // (hash, output index) of what a tensor of the new graph reads.
    auto resolve = [&](const Ref& t) -> std::pair<uint64_t, int> {
        if (dirty_[t.node] == 2)
            for (const auto& [s, d] : r.outputs)
                if (m.nodes[s.node] == t.node && s.idx == t.idx) {
                    if (d.node >= 0) return {dst_hash_[d.node], d.idx};
                    const Ref& v = m.vars[-1 - d.node];
                    return {g.nodes[v.node].hash, v.idx};
                }
        return {dirty_[t.node] == 1 ? new_hash_[t.node] : g.nodes[t.node].hash, t.idx};
    };
    for (int v = lo; v < n; ++v) {
        if (dirty_[v] != 1) continue;
        const Node& nd = g.nodes[v];
        new_hash_[v] = hash_of(node_seed(nd.type, nd.attr, nd.salt), nd.type,
                               nd.in.size(), [&](size_t i) { return resolve(nd.in[i]); });
    }
    uint64_t gh = 0;
    for (const Ref& o : g.outputs) {
        auto [ph, idx] = resolve(o);
        gh = mix(mix(gh, ph), idx);
    }
    return gh;
}

// ---- the one match -> filter -> apply loop -----------------------------------------------
void Core::for_each_rewrite(GraphIndex& ix, const Visit& visit) {
    const Graph& g = ix.g;
    std::vector<Match> found;
    for (int ri = 0; ri < static_cast<int>(rules.size()); ++ri) {
        found.clear();
        find_matches(*this, ix, ri, found);
        n_matches += found.size();
        for (Match& m : found) {
            // The cheap structural filters first, then the oracle's (memoized) check.
            if (weight_only(g, m) || !internal_uses_ok(g, rules[ri], m, ix.consumers)) continue;
            const auto& dst_attrs = oracle.check(ri, g, m);
            if (!dst_attrs || mirrored(g, ri, m)) continue;
            ++n_applicable;
            if (!visit(ri, m, *dst_attrs)) return;
        }
    }
}

std::vector<Core::Expansion> Core::expand(const Graph& g, int skip, int limit,
                                          const std::unordered_set<uint64_t>& passed) {
    std::vector<Expansion> out;
    if (limit == 0) return out;
    int seen = 0;
    GraphIndex ix = index(g);
    for_each_rewrite(ix, [&](int ri, Match& m, const std::vector<int>& dst_attrs) {
        const uint64_t key = match_key(g, ri, m);
        if (passed.count(key)) return true;
        auto ng = apply(g, ri, m, dst_attrs);
        if (!ng || seen++ < skip) return true;
        out.push_back({ri, key, std::move(*ng)});
        return limit < 0 || static_cast<int>(out.size()) < limit;
    });
    return out;
}

std::optional<Core::Traced> Core::rewrite_at(const Graph& g, uint64_t key) {
    std::optional<Traced> out;
    GraphIndex ix = index(g);
    for_each_rewrite(ix, [&](int ri, Match& m, const std::vector<int>& dst_attrs) {
        if (match_key(g, ri, m) != key) return true;
        std::vector<int> targets;
        if (auto ng = apply(g, ri, m, dst_attrs, &targets))
            out = Traced{ri, m.nodes, std::move(targets), std::move(*ng)};
        return false;
    });
    return out;
}

std::vector<Core::HashCheck> Core::hash_checks(const Graph& g) {
    std::vector<HashCheck> out;
    GraphIndex ix = index(g);
    for_each_rewrite(ix, [&](int ri, Match& m, const std::vector<int>& dst_attrs) {
        HashCheck c;
        c.rule = ri;
        c.predicted = rewrite_hash(g, ri, m, dst_attrs, ix.consumers, c.cycle);
        if (auto ng = apply(g, ri, m, dst_attrs)) c.built = ng->hash;
        out.push_back(c);
        return true;
    });
    return out;
}

}  // namespace taso
