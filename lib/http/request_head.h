// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::http {

// The request line and header fields of one HTTP/1.x request (RFC 9112), reduced to what a
// server of fixed GET paths acts on.
struct RequestHead {
  std::string method;
  // The target's path: origin-form without its query, or the path of an absolute-form target
  // ("http://host/metrics" -> "/metrics"); empty for authority- and asterisk-form.
  std::string path;
  std::string query;      // the target's query, without '?' (and without a fragment)
  std::string host;       // the Host field's value, empty when absent
  int minor_version = 1;  // HTTP/1.<minor>
  // The connection may carry another request after this one (HTTP/1.1 unless "Connection:
  // close"; HTTP/1.0 only with "Connection: keep-alive").
  bool keep_alive = true;
  // A body follows (Content-Length > 0 or any Transfer-Encoding): its framing is then ours to
  // honour, which a server that reads no bodies cannot, so it refuses and closes.
  bool has_body = false;
};

struct ParsedHead {
  // 0: `head` is complete and valid, and its `size` bytes (the empty line included) are used;
  // -1: more bytes are needed; otherwise the status code to refuse the request with: 400
  // (malformed), 431 (head longer than the limit), 505 (not HTTP/1.x).
  int status = -1;
  size_t size = 0;
  RequestHead head;
};

// Parses the head at the front of `buf`; a head that has not ended within `max_size` bytes is
// refused (431), so a client cannot make the caller buffer more. Empty lines before the request
// line are skipped (RFC 9112 section 2.2); bare LF ends a line as CRLF does.
ParsedHead ParseRequestHead(std::string_view buf, size_t max_size);

}  // namespace sluice::http
