// SPDX-License-Identifier: Apache-2.0
// The flag tables in docs/ are the binaries' option tables as base::OptionsMarkdown prints
// them, between "<!-- option-table: BINARY -->" and "<!-- /option-table -->". After changing a
// row, regenerate them: SLUICE_UPDATE_DOCS=1 build/agent/app/option_docs_test
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "lib/base/option_table.h"

#include "agent/app/options.h"
#include "tunnel/agent/proxy_agent_options.h"
#include "tunnel/server/server_options.h"

namespace sluice {
namespace {

constexpr const char* kEnd = "<!-- /option-table -->";

template <typename Options>
std::string Markdown(const std::string& program,
                     const std::function<std::vector<base::Option>(Options&)>& table_of,
                     const char* upstream) {
  Options o;
  base::FlagSet flags(program);
  const std::vector<base::Option> table = table_of(o);
  base::RegisterOptions(flags, table);
  return base::OptionsMarkdown(table, flags, upstream);
}

// Checks (or with SLUICE_UPDATE_DOCS rewrites) the section of docs/`doc` for `binary`.
void CheckDoc(const std::string& doc, const std::string& binary, const std::string& want) {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/docs/" + doc;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  const std::string begin = "<!-- option-table: " + binary + " -->\n";
  const size_t from = text.find(begin);
  ASSERT_NE(from, std::string::npos) << path << " has no \"" << begin << "\"";
  const size_t start = from + begin.size();
  const size_t end = text.find(kEnd, start);
  ASSERT_NE(end, std::string::npos) << path << ": no " << kEnd << " after " << begin;
  const std::string have = text.substr(start, end - start);
  if (have == want) {
    return;
  }
  if (std::getenv("SLUICE_UPDATE_DOCS") != nullptr) {
    text.replace(start, end - start, want);
    std::ofstream(path, std::ios::trunc) << text;
    return;
  }
  std::istringstream h(have);
  std::istringstream w(want);
  std::string hl;
  std::string wl;
  int line = 0;
  while (std::getline(w, wl)) {
    ++line;
    if (!std::getline(h, hl) || hl != wl) {
      break;
    }
  }
  ADD_FAILURE() << path << ": the " << binary << " table differs from its option table at row "
                << line << ";\n  docs:  " << hl << "\n  table: " << wl
                << "\nRegenerate it: SLUICE_UPDATE_DOCS=1 build/agent/app/option_docs_test";
}

TEST(OptionDocsTest, SluiceAgent) {
  CheckDoc("configuration.md", "sluice-agent",
           Markdown<app::AgentOptions>("sluice-agent", app::AgentOptionTable,
                                       "kube-proxy (KubeProxyConfiguration field)"));
}

TEST(OptionDocsTest, SluiceTunnelServer) {
  CheckDoc("tunnel.md", "sluice-tunnel-server",
           Markdown<tunnel::server::ServerOptions>(
               "sluice-tunnel-server", tunnel::server::ServerOptionTable, "upstream proxy-server"));
}

TEST(OptionDocsTest, SluiceProxyAgent) {
  CheckDoc("tunnel.md", "sluice-proxy-agent",
           Markdown<tunnel::agent::ProxyAgentFlags>(
               "sluice-proxy-agent", tunnel::agent::ProxyAgentOptionTable, "upstream proxy-agent"));
}

// Every row's name is registered once: two rows of one name would make one of them dead.
TEST(OptionDocsTest, NoOptionTwice) {
  app::AgentOptions a;
  tunnel::server::ServerOptions s;
  tunnel::agent::ProxyAgentFlags p;
  for (const std::vector<base::Option>& table :
       {app::AgentOptionTable(a), tunnel::server::ServerOptionTable(s),
        tunnel::agent::ProxyAgentOptionTable(p)}) {
    std::set<std::string_view> names;
    for (const base::Option& row : table) {
      EXPECT_TRUE(names.insert(row.name).second) << "--" << row.name << " twice";
    }
  }
}

}  // namespace
}  // namespace sluice
