import FerryCore
import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// An element of an S3 XML document: its name, its text and its child elements. S3's answers are small (an error,
/// a page of at most 1,000 keys), so they are read into a tree.
struct S3XMLElement: Sendable {
    var name: String
    var text = ""
    var children: [S3XMLElement] = []

    /// The first child named `name`.
    subscript(_ name: String) -> S3XMLElement? { children.first { $0.name == name } }
    /// Every child named `name`.
    func all(_ name: String) -> [S3XMLElement] { children.filter { $0.name == name } }
    /// The text of the first child named `name`.
    func text(_ name: String) -> String? { self[name]?.text }

    /// The root element of `data`, or nil when it is not XML.
    static func parse(_ data: Data) -> S3XMLElement? {
        let delegate = Builder()
        let parser = XMLParser(data: data)
        parser.delegate = delegate
        guard parser.parse(), let root = delegate.stack.first?.children.first else { return nil }
        return root
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack = [S3XMLElement(name: "")]

        func parser(
            _ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            stack.append(S3XMLElement(name: name))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            let element = stack.removeLast()
            stack[stack.count - 1].children.append(element)
        }
    }
}

/// Text escaped for an XML element's content.
func xmlEscaped(_ text: String) -> String { markupEscaped(text, apostrophe: "&apos;") }
