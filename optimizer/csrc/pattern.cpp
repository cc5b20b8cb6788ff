// Rules: their checks and match plans; the matcher (one rule's structural
// matches in a graph), outside uses, symmetries and match keys.

#include <algorithm>
#include <stdexcept>

#include "core.h"

namespace taso {

// ---- rules: checks and match plans ---------------------------------------------------
int Core::add_rule(Rule r) {
    const int np = static_cast<int>(r.src.size());
    if (np == 0) throw std::invalid_argument("a rule's source side is empty");
    auto check_side = [&](const std::vector<PNode>& side) {
        for (size_t p = 0; p < side.size(); ++p) {
            if (side[p].type < 0 || side[p].type >= static_cast<int>(kinds.size()) ||
                (kinds[side[p].type] != COMPUTE && kinds[side[p].type] != CONSTGEN))
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

// ---- the matcher ----------------------------------------------------------------------
GraphIndex::GraphIndex(const Graph& g_, size_t ntypes, size_t nclasses, size_t nroots)
    : g(g_), by_type(ntypes), consumers(g_.nodes.size()), filter_row(nclasses, -1),
      used(g_.nodes.size(), 0), root_found(nroots, -1) {
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
        by_type[g.nodes[i].type].push_back(i);
        for (const Ref& in : g.nodes[i].in) {
            auto& c = consumers[in.node];
            if (c.empty() || c.back() != i) c.push_back(i);
        }
    }
}

namespace {

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

}  // namespace

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
    GraphIndex ix = index(g);
    std::vector<Match> all, ok;
    find_matches(*this, ix, ri, all);
    for (auto& m : all)
        if (internal_uses_ok(g, rules[ri], m, ix.consumers)) ok.push_back(std::move(m));
    return ok;
}

uint64_t Core::match_key(const Graph& g, int ri, const Match& m) const {
    uint64_t h = mix(0x6b6579ULL, static_cast<uint64_t>(ri));
    for (size_t k = 0; k < m.nodes.size(); ++k)
        h = mix(mix(h, g.nodes[m.nodes[k]].hash), k < m.swap.size() ? m.swap[k] : 0);
    for (const Ref& v : m.vars) h = mix(mix(h, g.nodes[v.node].hash), v.idx);
    return h;
}

}  // namespace taso
