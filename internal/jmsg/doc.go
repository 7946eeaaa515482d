// Package jmsg is the Jupyter wire protocol and connection-file format, as pure
// functions: no sockets, no goroutines, no global state beyond constant tables.
//
// It owns:
//
//   - connection files: [Load]/[Parse] read and validate one (transport, ip, the five
//     ports, key, signature_scheme, kernel_name), keeping unknown fields in
//     [ConnInfo.Extra]; [ConnInfo.Marshal] writes jupyter_client's field names and
//     order; [WriteFile] replaces a file atomically with mode 0600; [KernelID] names a
//     kernel stably across restarts;
//   - message frames: [Split] cuts `[idents…, <IDS|MSG>, hmac, header, parent,
//     metadata, content, buffers…]` without copying; [Signer] signs and verifies with
//     the session key; [MsgType] and [Header] read a header; [NewMessage] builds the
//     few messages the supervisor emits itself.
//
// It assumes the Jupyter messaging spec 5.x and jupyter_client's semantics, which it
// follows even where they surprise: an empty key means messages are neither signed nor
// checked; buffers are not signed; the first <IDS|MSG> frame ends the identities.
// It does not reject replayed messages (jupyter_client's digest history): the kernel
// still does, and the supervisor only acts on a few idempotent requests.
//
// Validation errors are *[ConfigError], one line naming the file and the field, so a
// CLI can map them to exit status 2 with errors.As.
//
// The session key is a credential (whoever has it can run code as the user). It is
// never formatted into an error, a String/GoString/LogValue, or a log line by this
// package; [ConnInfo] and [Signer] redact it when printed. Callers must not print
// ConnInfo.Key themselves.
//
// Every function is safe for concurrent use; a *Signer may be shared by goroutines.
package jmsg
