// SPDX-License-Identifier: Apache-2.0
#include "lib/http/request_head.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/base/strings.h"

namespace sluice::http {

namespace {

// tchar of RFC 9110 section 5.6.2: what a method or a field name is made of.
bool IsToken(absl::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        absl::string_view("!#$%&'*+-.^_`|~").find(c) == absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

// Visible ASCII only: no spaces or controls may hide in a target.
bool IsVisible(absl::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c == 0x7f) {
      return false;
    }
  }
  return true;
}

// "/a/b?q" -> "/a/b"; "http://host:1/a?q" -> "/a"; "http://host" -> "/"; else "".
std::string TargetPath(absl::string_view target) {
  if (!absl::StartsWith(target, "/")) {
    const size_t scheme = target.find("://");
    if (scheme == absl::string_view::npos ||
        !(absl::EqualsIgnoreCase(target.substr(0, scheme), "http") ||
          absl::EqualsIgnoreCase(target.substr(0, scheme), "https"))) {
      return "";
    }
    target.remove_prefix(scheme + 3);
    const size_t slash = target.find('/');
    target = slash == absl::string_view::npos ? "/" : target.substr(slash);
  }
  return std::string(target.substr(0, target.find_first_of("?#")));
}

// "/a?q=1#f" -> "q=1"; "" without a query.
std::string TargetQuery(absl::string_view target) {
  const size_t q = target.find('?');
  if (q == absl::string_view::npos) {
    return "";
  }
  target.remove_prefix(q + 1);
  return std::string(target.substr(0, target.find('#')));
}

// The request line: 0, or the status code to refuse it with.
int ParseRequestLine(absl::string_view line, RequestHead& head) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty() || !IsVisible(parts[1])) {
    return 400;
  }
  head.method = std::string(parts[0]);
  head.path = TargetPath(parts[1]);
  head.query = TargetQuery(parts[1]);
  absl::string_view version = parts[2];
  if (!absl::ConsumePrefix(&version, "HTTP/") || version.size() != 3 || version[1] != '.' ||
      !absl::ascii_isdigit(static_cast<unsigned char>(version[0])) ||
      !absl::ascii_isdigit(static_cast<unsigned char>(version[2]))) {
    return 400;
  }
  if (version[0] != '1') {
    return 505;
  }
  head.minor_version = version[2] - '0';
  return 0;
}

// One field line: 0, or the status code to refuse it with. `close`/`keep_alive` collect the
// Connection options.
int ParseField(absl::string_view line, RequestHead& head, bool& close, bool& keep_alive) {
  const size_t colon = line.find(':');
  // A line starting with whitespace is an obsolete fold; whitespace before the colon is
  // forbidden (RFC 9112 section 5.1: a request smuggling vector). Both get 400.
  if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
    return 400;
  }
  const absl::string_view name = line.substr(0, colon);
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (absl::EqualsIgnoreCase(name, "Content-Length")) {
    uint64_t length = 0;
    if (value.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(value[0])) ||
        !absl::SimpleAtoi(value, &length)) {
      return 400;
    }
    head.has_body = head.has_body || length > 0;
  } else if (absl::EqualsIgnoreCase(name, "Host")) {
    head.host = std::string(value);
  } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
    head.has_body = true;
  } else if (absl::EqualsIgnoreCase(name, "Connection")) {
    for (absl::string_view option : absl::StrSplit(value, ',')) {
      option = absl::StripAsciiWhitespace(option);
      close = close || absl::EqualsIgnoreCase(option, "close");
      keep_alive = keep_alive || absl::EqualsIgnoreCase(option, "keep-alive");
    }
  }
  return 0;
}

}  // namespace

ParsedHead ParseRequestHead(std::string_view buf_in, size_t max_size) {
  const absl::string_view buf = base::Absl(buf_in);
  ParsedHead out;
  size_t pos = 0;
  bool request_line = true;
  bool close = false;
  bool keep_alive = false;
  for (;;) {
    const size_t eol = buf.find('\n', pos);
    if (eol == absl::string_view::npos || eol >= max_size) {
      out.status = buf.size() >= max_size ? 431 : -1;
      return out;
    }
    absl::string_view line = buf.substr(pos, eol - pos);
    pos = eol + 1;
    absl::ConsumeSuffix(&line, "\r");
    if (line.find_first_of(absl::string_view("\r\0", 2)) != absl::string_view::npos) {
      out.status = 400;  // a bare CR or a NUL: parsers disagree on those (RFC 9112 section 2.2)
      return out;
    }
    if (request_line && line.empty()) {
      continue;
    }
    if (line.empty()) {
      break;
    }
    const int status = request_line ? ParseRequestLine(line, out.head)
                                    : ParseField(line, out.head, close, keep_alive);
    if (status != 0) {
      out.status = status;
      return out;
    }
    request_line = false;
  }
  out.head.keep_alive = !close && (out.head.minor_version >= 1 || keep_alive);
  out.status = 0;
  out.size = pos;
  return out;
}

}  // namespace sluice::http
