#include "core.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <queue>
#include <stdexcept>
#include <unordered_set>

namespace taso {

namespace {

constexpr uint64_t HASH_SEED = 1469598103934665603ULL;

uint64_t mix(uint64_t h, uint64_t v) {
    // splitmix64 finalizer over the running hash and the next value
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

bool same_node(const Node& a, const Node& b) {
    return a.type == b.type && a.attr == b.attr && a.salt == b.salt && a.in == b.in;
}

}  // namespace

size_t VecHash::operator()(const std::vector<int64_t>& v) const {
    uint64_t h = v.size();
    for (int64_t x : v) h = mix(h, static_cast<uint64_t>(x));
    return static_cast<size_t>(h);
}

// ---- oracle ---------------------------------------------------------------------
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

// ---- graph store ------------------------------------------------------------------
Core::Core(std::vector<int> kinds_, Oracle::InferFn infer, Oracle::CheckFn check,
           Oracle::FilterFn filter, std::vector<char> commutative_)
    : oracle(std::move(infer), std::move(check), std::move(filter)), kinds(std::move(kinds_)),
      commutative(std::move(commutative_)) {}

std::optional<Graph> Core::finalize(std::vector<Node> raw, std::vector<Ref> outputs) {
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
        uint64_t h = mix(mix(mix(HASH_SEED, nd.type), nd.attr), nd.salt);
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

// ---- rules and matching -------------------------------------------------------------
int Core::add_rule(Rule r) {
    const int np = static_cast<int>(r.src.size());
    if (np == 0) throw std::invalid_argument("a rule's source side is empty");
    auto check_side = [&](const std::vector<PNode>& side) {
        for (size_t p = 0; p < side.size(); ++p) {
            if (side[p].type < 0 || side[p].type >= static_cast<int>(kinds.size()) ||
                kinds[side[p].type] != COMPUTE && kinds[side[p].type] != CONSTGEN)
                throw std::invalid_argument("a pattern node must be an operator");
            for (const Ref& in : side[p].in)
                if (in.node >= static_cast<int>(p) || (in.node < 0 && -1 - in.node >= r.nvars))
                    throw std::invalid_argument("pattern input out of range");
        }
    };
    check_side(r.src);
    check_side(r.dst);
    // What the Python side checks first (taso.rules_db.pattern), checked again
    // here: a malformed rule must be an error, never a crash.
    if (r.outputs.empty()) throw std::invalid_argument("a rule maps no output");
    std::vector<char> bound(r.nvars, 0);
    for (const PNode& p : r.src)
        for (const Ref& in : p.in)
            if (in.node < 0) bound[-1 - in.node] = 1;
    auto bound_ref = [&](const Ref& in, int side_size) {
        if (in.idx < 0) return false;
        return in.node < 0 ? -1 - in.node < r.nvars && bound[-1 - in.node] : in.node < side_size;
    };
    for (const PNode& p : r.dst)
        for (const Ref& in : p.in)
            if (!bound_ref(in, static_cast<int>(r.dst.size())))
                throw std::invalid_argument("the target reads a variable the source does not bind");
    for (const auto& [s, d] : r.outputs)
        if (s.node < 0 || s.idx < 0 || !bound_ref(d, static_cast<int>(r.dst.size())))
            throw std::invalid_argument("a rule output names no tensor of its side");
    const int ri = static_cast<int>(rules.size());
    for (int p = 0; p < np; ++p) {
        int& f = r.src[p].filter;
        if (f < 0) f = static_cast<int>(filter_reps.size());  // a class of its own
        if (f > static_cast<int>(filter_reps.size()))
            throw std::invalid_argument("filter classes must be numbered in order of use");
        if (f == static_cast<int>(filter_reps.size())) filter_reps.push_back({ri, p});
    }
    // The variables each rule output's target tensor depends on.
    std::vector<std::vector<int>> deps(r.dst.size());
    for (size_t j = 0; j < r.dst.size(); ++j) {
        for (const Ref& in : r.dst[j].in) {
            if (in.node < 0) deps[j].push_back(-1 - in.node);
            else deps[j].insert(deps[j].end(), deps[in.node].begin(), deps[in.node].end());
        }
        std::sort(deps[j].begin(), deps[j].end());
        deps[j].erase(std::unique(deps[j].begin(), deps[j].end()), deps[j].end());
    }
    r.dst_deps.clear();
    for (const auto& [s, d] : r.outputs) {
        if (s.node < 0 || s.node >= np) throw std::invalid_argument("a rule output must be a source node");
        r.dst_deps.push_back(d.node < 0 ? std::vector<int>{-1 - d.node} : deps[d.node]);
    }
    r.uses.assign(np, {});
    for (int q = 0; q < np; ++q)
        for (int i = 0; i < static_cast<int>(r.src[q].in.size()); ++i) {
            const Ref& in = r.src[q].in[i];
            if (in.node >= 0) r.uses[in.node].push_back({q, i, in.idx});
        }
    // Greedy plan: start at the last node (usually the sink); then prefer a
    // producer of a matched node (determined), then a consumer of something
    // bound (few candidates), and a fresh root only for a disconnected part.
    std::vector<char> done(np, 0), var_bound(r.nvars, 0);
    auto mark = [&](int p) {
        done[p] = 1;
        for (const Ref& in : r.src[p].in)
            if (in.node < 0) var_bound[-1 - in.node] = 1;
    };
    r.plan.clear();
    for (int count = 0; count < np; ++count) {
        Step st;
        bool found = false;
        for (int q = np - 1; q >= 0 && !found; --q) {
            if (!done[q]) continue;
            for (int i = 0; i < static_cast<int>(r.src[q].in.size()) && !found; ++i) {
                const Ref& in = r.src[q].in[i];
                if (in.node >= 0 && !done[in.node]) {
                    st.kind = Step::PRODUCER;
                    st.pnode = in.node;
                    st.a = q;
                    st.b = i;
                    found = true;
                }
            }
        }
        for (int p = np - 1; p >= 0 && !found; --p) {
            if (done[p]) continue;
            for (int i = 0; i < static_cast<int>(r.src[p].in.size()) && !found; ++i) {
                const Ref& in = r.src[p].in[i];
                if (in.node < 0 && var_bound[-1 - in.node]) {
                    st.kind = Step::CONSUMER_VAR;
                    st.a = -1 - in.node;
                } else if (in.node >= 0 && done[in.node]) {
                    st.kind = Step::CONSUMER_NODE;
                    st.a = in.node;
                    st.b = in.idx;
                } else {
                    continue;
                }
                st.pnode = p;
                st.pos = i;
                found = true;
            }
        }
        if (!found) {
            int p = np - 1;
            while (done[p]) --p;
            st.kind = Step::ROOT;
            st.pnode = p;
        }
        mark(st.pnode);
        r.plan.push_back(st);
    }
    const PNode& root = r.src[r.plan[0].pnode];
    std::vector<int64_t> shape{root.type};
    for (const Ref& in : root.in) {
        shape.push_back(in.node < 0 ? -1 : r.src[in.node].type);
        shape.push_back(in.node < 0 ? 0 : in.idx);
    }
    r.root_shape = root_shapes.emplace(shape, static_cast<int>(root_shapes.size())).first->second;
    rules.push_back(std::move(r));
    return ri;
}

namespace {

void index_graph(const Graph& g, size_t ntypes, std::vector<std::vector<int>>& by_type,
                 std::vector<std::vector<int>>& consumers) {
    by_type.assign(ntypes, {});
    consumers.assign(g.nodes.size(), {});
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
        by_type[g.nodes[i].type].push_back(i);
        for (const Ref& in : g.nodes[i].in) {
            auto& c = consumers[in.node];
            if (c.empty() || c.back() != i) c.push_back(i);
        }
    }
}

// What matching any rule against one graph shares: the graph's indexes, the
// filter's answers per (filter class, node, operand order), scratch space.
struct GraphIndex {
    const Graph& g;
    std::vector<std::vector<int>> by_type, consumers;
    std::vector<int> filter_row;       // per filter class: its row in filter_ok, or -1
    std::vector<int8_t> filter_ok;     // rows of 2 per node: -1 unknown, 0 fails, 1 passes
    std::vector<char> used;            // nodes in the partial match (all 0 between rules)
    std::vector<int8_t> root_found;    // per root shape: -1 unknown, 0 no candidate, 1 some

    GraphIndex(const Graph& g_, size_t ntypes, size_t nclasses, size_t nroots)
        : g(g_), filter_row(nclasses, -1), used(g_.nodes.size(), 0), root_found(nroots, -1) {
        index_graph(g, ntypes, by_type, consumers);
    }
};

struct Matcher {
    const Graph& g;
    const Rule& r;
    Oracle& oracle;
    const Core& core;
    GraphIndex& ix;
    std::vector<Match>& found;
    Match m;
    std::vector<char>& used;

    Matcher(const Rule& r_, Oracle& o, const Core& c, GraphIndex& ix_, std::vector<Match>& out)
        : g(ix_.g), r(r_), oracle(o), core(c), ix(ix_), found(out), used(ix_.used) {
        m.nodes.assign(r.src.size(), -1);
        m.vars.assign(r.nvars, Ref{});
        m.swap.assign(r.src.size(), 0);
    }

    bool filter_ok(int p, int c, bool swap) {
        const int cls = r.src[p].filter;
        int& row = ix.filter_row[cls];
        if (row < 0) {
            row = static_cast<int>(ix.filter_ok.size());
            ix.filter_ok.resize(ix.filter_ok.size() + 2 * g.nodes.size(), -1);
        }
        int8_t& v = ix.filter_ok[row + 2 * c + swap];
        if (v < 0) {
            const auto& [rr, rp] = core.filter_reps[cls];
            v = oracle.node_ok(rr, rp, g, g.nodes[c], swap);
        }
        return v;
    }

    // The graph tensor that input i of matched pattern node p reads.
    const Ref& input(int p, int i) const {
        return g.nodes[m.nodes[p]].in[m.swap[p] ? 1 - i : i];
    }

    // Assign graph node c to pattern node p (its two inputs swapped if `swap`);
    // returns the variables it bound (to undo), or false when it does not fit
    // what is matched so far.
    bool assign(int p, int c, bool swap, std::vector<int>& bound) {
        const PNode& pn = r.src[p];
        const Node& nd = g.nodes[c];
        if (used[c] || nd.type != pn.type || nd.in.size() != pn.in.size()) return false;
        if (!filter_ok(p, c, swap)) return false;
        for (size_t i = 0; i < pn.in.size(); ++i) {
            const Ref& pin = pn.in[i];
            const Ref& actual = nd.in[swap ? 1 - i : i];
            if (pin.node < 0) {
                Ref& v = m.vars[-1 - pin.node];
                if (v.node < 0) {
                    v = actual;
                    bound.push_back(-1 - pin.node);
                } else if (!(v == actual)) {
                    return false;
                }
            } else if (m.nodes[pin.node] >= 0 && !(actual == Ref{m.nodes[pin.node], pin.idx})) {
                return false;
            }
        }
        for (const auto& [q, i, k] : r.uses[p])
            if (m.nodes[q] >= 0 && !(input(q, i) == Ref{c, k})) return false;
        return true;
    }

    void step(size_t s) {
        if (s == r.plan.size()) {
            found.push_back(m);
            return;
        }
        const Step& st = r.plan[s];
        auto attempt = [&](int c) {
            const int orders = core.swappable(g.nodes[c]) ? 2 : 1;
            for (int swap = 0; swap < orders; ++swap) {
                std::vector<int> bound;
                if (assign(st.pnode, c, swap, bound)) {
                    m.nodes[st.pnode] = c;
                    m.swap[st.pnode] = static_cast<char>(swap);
                    used[c] = 1;
                    step(s + 1);
                    used[c] = 0;
                    m.nodes[st.pnode] = -1;
                    m.swap[st.pnode] = 0;
                }
                for (int v : bound) m.vars[v] = Ref{};
            }
        };
        switch (st.kind) {
            case Step::ROOT:
                for (int c : ix.by_type[r.src[st.pnode].type]) attempt(c);
                break;
            case Step::PRODUCER: {
                const Ref& in = input(st.a, st.b);
                if (in.idx == r.src[st.a].in[st.b].idx) attempt(in.node);
                break;
            }
            case Step::CONSUMER_VAR:
            case Step::CONSUMER_NODE: {
                Ref t = st.kind == Step::CONSUMER_VAR ? m.vars[st.a] : Ref{m.nodes[st.a], st.b};
                for (int c : ix.consumers[t.node]) {
                    const auto& in = g.nodes[c].in;
                    const bool at_pos = static_cast<int>(in.size()) > st.pos && in[st.pos] == t;
                    // A commutative consumer may read it at the other operand.
                    if (at_pos || (core.swappable(g.nodes[c]) && in[1 - st.pos] == t)) attempt(c);
                }
                break;
            }
        }
    }
};

// The structural matches of rule ri in ix's graph (before the outside-use check).
void find_matches(Core& core, GraphIndex& ix, int ri, std::vector<Match>& out) {
    const Rule& r = core.rules[ri];
    const PNode& root = r.src[r.plan[0].pnode];
    // Most rules fail at the root: its type or the types of the producers its
    // pattern inputs name. Tell that, once per root shape, before setting up a match.
    int8_t& found = ix.root_found[r.root_shape];
    if (found == 0) return;
    auto fits = [&](const Node& nd, bool swap) {
        for (size_t i = 0; i < root.in.size(); ++i) {
            const Ref& pin = root.in[i];
            if (pin.node < 0) continue;
            const Ref& t = nd.in[swap ? 1 - i : i];
            if (t.idx != pin.idx || ix.g.nodes[t.node].type != r.src[pin.node].type) return false;
        }
        return true;
    };
    if (found < 0) {
        found = 0;
        for (int c : ix.by_type[root.type]) {
            const Node& nd = ix.g.nodes[c];
            if (nd.in.size() != root.in.size()) continue;
            if (fits(nd, false) || (core.swappable(nd) && fits(nd, true))) {
                found = 1;
                break;
            }
        }
        if (!found) return;
    }
    Matcher(r, core.oracle, core, ix, out).step(0);
}

// A match is applicable only if every tensor it computes that is not replaced
// by the target is used inside the match alone (else removing it breaks a user).
bool internal_uses_ok(const Graph& g, const Rule& r, const Match& m,
                      const std::vector<std::vector<int>>& consumers) {
    for (size_t p = 0; p < r.src.size(); ++p) {
        const int c = m.nodes[p];
        for (int k = 0; k < static_cast<int>(g.nodes[c].out.size()); ++k) {
            bool mapped = false;
            for (const auto& [s, d] : r.outputs)
                if (s.node == static_cast<int>(p) && s.idx == k) mapped = true;
            if (mapped) continue;
            for (const Ref& o : g.outputs)
                if (o == Ref{c, k}) return false;
            for (int u : consumers[c]) {
                bool uses_k = false;
                for (const Ref& in : g.nodes[u].in)
                    if (in == Ref{c, k}) uses_k = true;
                if (uses_k && std::find(m.nodes.begin(), m.nodes.end(), u) == m.nodes.end())
                    return false;
            }
        }
    }
    return true;
}

}  // namespace

bool Core::weight_only(const Graph& g, const Match& m) const {
    for (int c : m.nodes)
        if (!g.nodes[c].wonly) return false;
    return true;
}

bool Core::mirrored(const Graph& g, int ri, const Match& m) {
    for (const auto& sym : rules[ri].symmetries) {
        Match mm = m;
        for (size_t i = 0; i < m.nodes.size(); ++i) {
            mm.nodes[sym.nodes[i]] = m.nodes[i];
            mm.swap[sym.nodes[i]] = m.swap[i];
        }
        if (!(mm.nodes < m.nodes)) continue;
        for (size_t v = 0; v < m.vars.size(); ++v) mm.vars[sym.vars[v]] = m.vars[v];
        if (oracle.check(ri, g, mm)) return true;
    }
    return false;
}

std::vector<Match> Core::matches(const Graph& g, int ri) {
    GraphIndex ix(g, kinds.size(), filter_reps.size(), root_shapes.size());
    std::vector<Match> all, ok;
    find_matches(*this, ix, ri, all);
    for (auto& m : all)
        if (internal_uses_ok(g, rules[ri], m, ix.consumers)) ok.push_back(std::move(m));
    return ok;
}

// Whether `t` names an existing output of an existing node of `raw`.
static bool has_output(const std::vector<Node>& raw, const Ref& t) {
    return t.node >= 0 && t.node < static_cast<int>(raw.size()) && t.idx >= 0 &&
           t.idx < static_cast<int>(raw[t.node].out.size());
}

std::optional<Graph> Core::apply(const Graph& g, int ri, const Match& m) {
    const Rule& r = rules[ri];
    const auto& dst_attrs = oracle.check(ri, g, m);
    if (!dst_attrs) return std::nullopt;
    ++n_applicable;
    std::vector<Node> raw = g.nodes;
    const int n = static_cast<int>(raw.size());
    for (size_t j = 0; j < r.dst.size(); ++j) {
        Node nd;
        nd.type = r.dst[j].type;
        nd.attr = (*dst_attrs)[j];
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
    return finalize(std::move(raw), std::move(outputs));
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
        dst_hash_[j] = hash_of(mix(mix(mix(HASH_SEED, r.dst[j].type), dst_attrs[j]), 0),
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
        new_hash_[v] = hash_of(mix(mix(mix(HASH_SEED, nd.type), nd.attr), nd.salt), nd.type,
                               nd.in.size(), [&](size_t i) { return resolve(nd.in[i]); });
    }
    uint64_t gh = 0;
    for (const Ref& o : g.outputs) {
        auto [ph, idx] = resolve(o);
        gh = mix(mix(gh, ph), idx);
    }
    return gh;
}

uint64_t Core::match_key(const Graph& g, int ri, const Match& m) const {
    uint64_t h = mix(0x6b6579ULL, static_cast<uint64_t>(ri));
    for (size_t k = 0; k < m.nodes.size(); ++k)
        h = mix(mix(h, g.nodes[m.nodes[k]].hash), k < m.swap.size() ? m.swap[k] : 0);
    for (const Ref& v : m.vars) h = mix(mix(h, g.nodes[v.node].hash), v.idx);
    return h;
}

std::vector<Core::Expansion> Core::expand(const Graph& g, int skip, int limit,
                                          const std::unordered_set<uint64_t>& passed) {
    std::vector<Expansion> out;
    if (limit == 0) return out;
    int seen = 0;
    for (int ri = 0; ri < static_cast<int>(rules.size()); ++ri)
        for (const Match& m : matches(g, ri)) {
            const uint64_t key = match_key(g, ri, m);
            if (passed.count(key) || weight_only(g, m) || mirrored(g, ri, m)) continue;
            if (auto ng = apply(g, ri, m)) {
                if (seen++ < skip) continue;
                out.push_back({ri, key, std::move(*ng)});
                if (limit > 0 && static_cast<int>(out.size()) == limit) return out;
            }
        }
    return out;
}

std::vector<Core::HashCheck> Core::hash_checks(const Graph& g) {
    std::vector<std::vector<int>> by_type, consumers;
    index_graph(g, kinds.size(), by_type, consumers);
    std::vector<HashCheck> out;
    for (int ri = 0; ri < static_cast<int>(rules.size()); ++ri)
        for (const Match& m : matches(g, ri)) {
            const auto& dst_attrs = oracle.check(ri, g, m);
            if (!dst_attrs) continue;
            HashCheck c;
            c.rule = ri;
            c.predicted = rewrite_hash(g, ri, m, *dst_attrs, consumers, c.cycle);
            if (auto ng = apply(g, ri, m)) c.built = ng->hash;
            out.push_back(c);
        }
    return out;
}

// ---- search -------------------------------------------------------------------------
SearchResult Core::search(const Graph& g0, const SearchOptions& opt) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };

    // Expanded graphs are kept (their children are rebuilt from them when popped);
    // queued candidates are only a parent, a rule and a match.
    struct Expanded {
        Graph g;
        int parent;
        int rule;
    };
    struct Candidate {
        double cost;
        uint64_t seq;
        int parent;
        int rule;
        Match m;
    };
    auto worse = [](const Candidate& a, const Candidate& b) {
        return a.cost > b.cost || (a.cost == b.cost && a.seq > b.seq);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
    std::vector<Expanded> expanded;
    std::unordered_set<uint64_t> seen{g0.hash};
    const int max_ops = static_cast<int>(opt.max_ops_factor * std::max(g0.num_ops, 1));

    const double base = g0.const_bytes;
    SearchResult res;
    res.initial_cost = g0.cost;
    res.best = g0;
    int best_parent = -1, best_rule = -1;
    uint64_t seq = 0;

    auto expand_one = [&](int e) {
        const Graph& g = expanded[e].g;
        GraphIndex ix(g, kinds.size(), filter_reps.size(), root_shapes.size());
        const auto& consumers = ix.consumers;
        for (int ri = 0; ri < static_cast<int>(rules.size()); ++ri) {
            std::vector<Match> found;
            find_matches(*this, ix, ri, found);
            n_matches += found.size();
            for (Match& m : found) {
                if (weight_only(g, m) || !internal_uses_ok(g, rules[ri], m, consumers)) continue;
                const auto& dst_attrs = oracle.check(ri, g, m);
                if (!dst_attrs || mirrored(g, ri, m)) continue;
                // Most rewrites reach a graph already seen: tell by hash, unbuilt.
                // A graph that failed (bad shapes, too many operators) fails
                // again: its hash is remembered as well.
                bool cycle = false;
                auto h = rewrite_hash(g, ri, m, *dst_attrs, consumers, cycle);
                if (cycle) continue;
                if (h && !seen.insert(*h).second) {
                    ++n_known;
                    continue;
                }
                auto ng = apply(g, ri, m);
                if (!ng || ng->num_ops > max_ops) continue;
                if (!h && !seen.insert(ng->hash).second) continue;
                const double cost = rank(*ng, base);
                if (cost < rank(res.best, base)) {
                    res.best = *ng;
                    best_parent = e;
                    best_rule = ri;
                }
                if (cost < opt.alpha * rank(res.best, base)) {
                    ++n_pushed;
                    queue.push(Candidate{cost, seq++, e, ri, std::move(m)});
                }
            }
        }
    };

    expanded.push_back({g0, -1, -1});
    expand_one(0);
    res.expanded = 1;
    while (!queue.empty() && res.expanded < opt.budget) {
        if (opt.time_limit > 0 && elapsed() > opt.time_limit) break;
        Candidate c = queue.top();
        queue.pop();
        if (c.cost >= opt.alpha * rank(res.best, base)) continue;
        auto g = apply(expanded[c.parent].g, c.rule, c.m);
        if (!g) continue;  // cannot happen: it was built once already
        expanded.push_back({std::move(*g), c.parent, c.rule});
        expand_one(static_cast<int>(expanded.size()) - 1);
        res.expanded++;
        if (opt.progress && opt.progress_every > 0 && res.expanded % opt.progress_every == 0)
            opt.progress(res.expanded, rank(res.best, base), queue.size());
    }
    res.budget_exhausted = !queue.empty();
    res.generated = static_cast<int>(seen.size());
    if (best_rule >= 0) {
        res.applied.push_back(best_rule);
        for (int e = best_parent; e > 0; e = expanded[e].parent) res.applied.push_back(expanded[e].rule);
        std::reverse(res.applied.begin(), res.applied.end());
    }
    res.seconds = elapsed();
    return res;
}

}  // namespace taso
