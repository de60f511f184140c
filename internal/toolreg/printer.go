package toolreg

import (
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the schema validator's messages.
var printer = message.NewPrinter(language.English)
