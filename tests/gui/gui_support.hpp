// What the viewer's widget tests share: running the stratsim binary to make their files, and the
// input events a person sends that QTest has no one-call helper for.
#pragma once

#include <QApplication>
#include <QSettings>
#include <QTemporaryDir>
#include <QWheelEvent>
#include <QtTest/QtTest>

#include <cstdlib>

namespace stratsim::test {

// Settings in the test's own folder, under its own application name, so no test reads another's
// window state or recent files (or the user's).
inline void isolate_settings(const QTemporaryDir& dir, const char* application) {
  QSettings::setDefaultFormat(QSettings::IniFormat);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir.filePath("settings"));
  QApplication::setOrganizationName("stratsim-test");
  QApplication::setApplicationName(application);
}

inline void run(const QString& command) {
  const int status = std::system(command.toLocal8Bit().constData());
  QVERIFY2(status == 0, qPrintable(command));
}

inline void wheel(QWidget* widget, QPoint at, int delta, Qt::KeyboardModifiers modifiers = Qt::NoModifier) {
  QWheelEvent event(at, widget->mapToGlobal(at), QPoint(), QPoint(0, delta), Qt::NoButton, modifiers, Qt::NoScrollPhase,
                    false);
  QApplication::sendEvent(widget, &event);
}

}  // namespace stratsim::test
