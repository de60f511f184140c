// A program outside idemctl that uses its public client as any user
// would: it imports github.com/idemctl/idemctl/client and nothing else of
// idemctl. client/external_test.go runs it against a real server.
module example.com/usermod

go 1.26.0

require github.com/idemctl/idemctl v0.0.0

replace github.com/idemctl/idemctl => ../../..
