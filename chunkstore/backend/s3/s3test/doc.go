// Package s3test runs a real S3 server for tests: versitygw with its posix
// backend on a temporary directory, listening on 127.0.0.1.
//
//	srv := s3test.Start(t)           // skips (or fails, with CI=true) if versitygw is missing
//	b := srv.Backend(t, srv.NewBucket(t), "prefix")
//
// The versitygw binary is found through $CAIRN_VERSITYGW, then
// <repository root>/.bin/versitygw (installed by `make test`), then $PATH.
// Stop and Restart kill the server and start it again on the same port and
// directory, for fault tests.
package s3test
